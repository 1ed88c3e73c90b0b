"""The web UI's second day (issue 24) over a real database (SQLite and PostgreSQL): why a job
waits, problems in numeric order, best configs filtered before they are paginated, pages
that fit a narrow window, winner and aborted markers, rate units, readable labels, the
search views, the compare page, offline API docs and ``/``. The browser checks the same in
test_ui_browser.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.api.ui import charts, data
from service.api.ui.labels import SUSPECT_TEXT, natural_key, problem_label, problem_sort_key
from tests.service.api.test_ui import KS, page, tune_reduce_sweep


def reduce_problem(k: int, m: int = 64) -> dict[str, Any]:
    return {"m": m, "k": k, "kind": "sum"}


def problem_cells(text: str, table: str) -> list[str]:
    body = text.split(f'<table id="{table}">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<td data-sort="([^"]+)">', body)


def test_a_queued_job_says_what_it_waits_for_on_the_jobs_list_and_its_page(api: Any) -> None:
    job = api.submit()
    wanted = "waiting for a worker with a cpu device; no worker is connected"
    assert wanted in page(api, "/ui/jobs")
    text = page(api, f"/ui/jobs/{job['id']}")
    assert f'<p class="waiting" id="waiting-for">{wanted}</p>' in text
    assert f"nothing measured yet: {wanted}" in text
    assert api.get_job(job["id"])["waiting_for"] == wanted  # the API's own text
    api.register(api.CPU_DEVICE)  # a live worker that can take it: nothing to explain
    assert "waiting for" not in page(api, f"/ui/jobs/{job['id']}")


def test_problems_sort_by_their_dims_as_numbers(api: Any) -> None:
    ks = (16384, 256, 4096, 1024)
    for k in ks:
        api.tune([api.measurement(f"v{k}", 10.0)], problems=[reduce_problem(k)])
    best = [problem_label(reduce_problem(k)) for k in sorted(ks)]
    assert problem_cells(page(api, "/ui/best"), "best") == best
    job = api.submit(problems=[reduce_problem(k) for k in ks])
    rows = re.findall(r"<tr><td>(m=64 k=\d+ kind=sum)</td>", page(api, f"/ui/jobs/{job['id']}"))
    assert rows == best
    assert sorted(["m=1 k=16384", "m=1 k=256"], key=natural_key) == ["m=1 k=256", "m=1 k=16384"]
    assert problem_sort_key({"m": 2, "k": 256}) < problem_sort_key({"m": 2, "k": 1024})


def test_best_configs_are_filtered_before_they_are_paginated(
    api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CPU winners sort before the H200's (smaller K): a limit taken before the device filter
    # (the old LIMIT 500, here a page of 2) left no H200 row on the first page
    for k in (32, 64, 128):
        api.tune([api.measurement(f"cpu{k}", 10.0)], problems=[reduce_problem(k)])
    tune_reduce_sweep(api)
    monkeypatch.setattr(data, "PAGE_SIZE", 2)
    everything = page(api, "/ui/best")
    assert everything.count('<tr class="best">') == 2
    assert "rows 1–2 of <span" in everything and '<span class="total">6</span>' in everything
    device = "cuda:NVIDIA H200:sm_90:132"
    first = page(api, f"/ui/best?device={device}")
    assert first.count('<tr class="best">') == 2 and "NVIDIA H200 (cuda sm_90, 132 SMs)" in first
    assert '<span class="total">3</span>' in first and "cpu32" not in first
    link = re.search(r'<a rel="next" href="([^"]+)"', first)
    assert link is not None
    second = page(api, link.group(1).replace("&amp;", "&"))
    assert second.count('<tr class="best">') == 1 and "rows 3–3 of" in second
    assert problem_cells(first, "best") + problem_cells(second, "best") == [
        problem_label({"m": 2**22 // k, "k": k, "kind": "sum"}) for k in sorted(KS, reverse=True)
    ]  # by m (= 2^22 / k) first, as numbers
    assert page(api, "/ui/best?page=99").count('<tr class="best">') == 2  # the last page
    page(api, "/ui/best?page=0", status=422)


def test_pages_fit_a_narrow_window(api: Any) -> None:
    job = tune_reduce_sweep(api)
    for path in ("/ui/jobs", f"/ui/jobs/{job['id']}", "/ui/best"):
        text = page(api, path)
        assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
        assert '<script src="/ui/static/sortable.js" defer></script>' in text
        tables = text.count("<table")
        assert tables and text.count('<div class="table-wrap">\n<table') == tables, path
    svg = re.findall(r"<svg [^>]*>", page(api, f"/ui/jobs/{job['id']}"))
    assert svg and all('width="100%"' in s and "viewBox" in s for s in svg)
    assert 'width="720"' not in page(api, f"/ui/jobs/{job['id']}")
    script = api.client.get("/ui/static/sortable.js")
    assert script.status_code == 200 and "data-sort" in script.text


def test_the_line_plot_marks_winners_and_draws_aborted_variants(api: Any) -> None:
    job = tune_reduce_sweep(api)
    text = page(api, f"/ui/jobs/{job['id']}")
    marks = re.findall(r'<path class="winner-mark" data-x="(\d+)"', text)
    assert sorted(int(x) for x in marks) == sorted(KS)
    assert 'class="point aborted"' not in text

    def m(outcome: str, k: int, gbps: float, pack: int) -> dict[str, Any]:
        return {"variant_id": f"p{pack}-{k}-{outcome}", "variant_name": f"p{pack}",
                "params": {"pack": pack}, "outcome": outcome, "problem": reduce_problem(k),
                "throughput": gbps, "throughput_unit": "GB/s"}  # fmt: skip

    rows = [m("ok", 256, 10.0, 4), m("ok", 4096, 30.0, 4), m("aborted_slow", 1024, 20.0, 4)]
    rows.append(m("ok", 1024, 5.0, 4))  # slower than the aborted one: no dip to 5
    rows.append(m("wrong_result", 1024, 99.0, 4))  # no time that counts
    (line,), _ = charts.bandwidth_series(rows)
    assert [(p.x, p.y, p.kind) for p in sorted(line.points)] == [
        (256.0, 10.0, "ok"),
        (1024.0, 20.0, "aborted"),
        (4096.0, 30.0, "ok"),
    ]


def test_rates_are_shown_in_the_unit_of_their_magnitude(api: Any) -> None:
    shape = {"m": 64, "n": 64, "k": 64}
    items = [
        api.measurement("gemm_cpu_a", 10.0, throughput=0.0523, throughput_unit="TFLOP/s"),
        api.measurement("gemm_cpu_b", 20.0, throughput=0.0262, throughput_unit="TFLOP/s"),
    ]
    job = api.tune(items, op="gemm", dtype="f32", problems=[shape])
    text = page(api, f"/ui/jobs/{job['id']}")
    assert "52.3 GFLOP/s" in text and "0.1 TFLOP/s" not in text and "0.0 TFLOP/s" not in text
    assert re.search(r'class="axis-label" x="300" y="\d+">GFLOP/s</text>', text)  # bar axis
    assert "52.3 GFLOP/s" in page(api, "/ui/best")


def test_headers_read_as_words_and_suspect_is_explained(api: Any) -> None:
    suspect = api.measurement("reduce_p4", 10.0, suspect=True, provenance={"host": {"cores": 2}})
    job = api.tune([suspect, api.measurement("reduce_p8", 12.0)])
    text = page(api, f"/ui/jobs/{job['id']}")
    assert "{&#39;" not in text and "{'" not in text  # no Python dict anywhere
    assert "device cpu · exhaustive · budget at most 8 variants" in text
    assert "m=1024 k=4096 kind=sum" in text
    assert f'<span class="badge suspect" title="{SUSPECT_TEXT}">suspect</span>' in text
    assert 'id="suspect-legend"' in text and "Interference only slows a run down" in text
    measurements = api.client.get("/v1/measurements", params={"job_id": job["id"]}).json()
    flagged = next(m for m in measurements["measurements"] if m["suspect"])
    text = page(api, f"/ui/measurements/{flagged['id']}")
    assert 'id="suspect-legend"' in text
    assert '<code>{"cores": 2}</code>' in text and "{&#39;" not in text  # JSON, not Python
    assert "90% of a core" in SUSPECT_TEXT and "hardware power brake" in SUSPECT_TEXT


def test_api_docs_work_offline_and_the_root_goes_to_the_ui(api: Any) -> None:
    docs = page(api, "/docs")
    scripts = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', docs)
    assert scripts and all(s.startswith("/") for s in scripts), scripts
    assert "cdn." not in docs and "https://" not in docs.split("<body>")[0]
    for asset in scripts:
        response = api.client.get(asset)
        assert response.status_code == 200 and len(response.content) > 10_000, asset
    assert "redoc.standalone.js" in page(api, "/redoc")
    root = api.client.get("/", follow_redirects=False)
    assert root.status_code in (302, 307) and root.headers["location"] == "/ui"
    assert '<table id="jobs">' in api.client.get("/").text or "no jobs yet" in page(api, "/")


def test_the_search_view_plots_time_per_parameter_and_the_best_so_far(api: Any) -> None:
    job = tune_reduce_sweep(api)
    problem = next(p for p in job["problems"] if p["problem"]["k"] == 1024)
    text = page(api, f"/ui/jobs/{job['id']}")
    assert f'href="/ui/jobs/{job["id"]}/problems/{problem["task_id"]}"' in text
    text = page(api, f"/ui/jobs/{job['id']}/problems/{problem['task_id']}")
    params = re.findall(r'<svg class="chart scatter" data-param="(\w+)"', text)
    assert params == ["pack", "strategy", "threads"]  # group is 32 in every candidate
    assert '<span class="param">group=32</span>' in text
    assert text.count('class="point failed"') == 1 + len(params)  # the wrong result, in each
    assert text.count('<path class="winner-mark"') == 1 + len(params)
    steps = re.search(r'<polyline class="best-so-far" data-steps="(\d+)"', text)
    assert steps is not None and int(steps.group(1)) >= 1
    assert text.count('<tr class="candidate') == 9
    page(api, f"/ui/jobs/{job['id']}/problems/nope", status=404)


def test_two_jobs_side_by_side(api: Any) -> None:
    shapes = [reduce_problem(256), reduce_problem(1024)]
    slow = api.submit(problems=shapes)
    fast = api.submit(problems=shapes + [reduce_problem(4096)])
    worker = api.register(api.CPU_DEVICE)
    medians = {slow["id"]: 20.0, fast["id"]: 10.0}
    while (lease := api.lease(worker)) is not None:
        median = medians[lease["task"]["job_id"]]
        api.upload(lease["lease_id"], [api.measurement(f"v{median:.0f}", median)])
    text = page(api, f"/ui/compare?a={slow['id']}&b={fast['id']}")
    assert text.count('<tr class="compare-row">') == 3
    assert re.findall(r'<td class="num speedup" data-sort="([^"]*)">', text) == ["2.0", "2.0", ""]
    assert '<strong id="geomean">2.00×</strong>' in text
    assert "the 2 problems both jobs tuned" in text
    form = page(api, "/ui/compare")
    assert form.count("<option value=") == 2 and '<table id="compare">' not in form
    assert f"/ui/compare?a={slow['id']}" in page(api, f"/ui/jobs/{slow['id']}")
    assert "not found" in page(api, f"/ui/compare?a={slow['id']}&b=nope", status=404)
    page(api, "/ui/compare?a=" + "x" * 101 + "&b=y", status=422)
