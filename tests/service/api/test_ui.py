"""The web UI's pages over a real database (SQLite and PostgreSQL): tables, plots, provenance,
filters, refresh, escaping. The browser test is test_ui_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from service.api.ui.charts import bandwidth_series, line_params, problem_varying_params
from service.settings import Settings

H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132}
KS = (256, 1024, 4096)


def row_measurement(pack: int, strategy: str, threads: int, k: int, gbps: float) -> dict:
    name = f"reduce_f16_p{pack}_{strategy}_t{threads}"
    # the time of the f16 bytes read and written (2^22 elements, m = 2^22 / k sums) at gbps
    median = (2**22 + 2**22 // k) * 2 / gbps / 1e3
    return {
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": {"pack": pack, "strategy": strategy, "group": 32, "threads": threads},
        "outcome": "ok",
        "median_us": median,
        "p20_us": median * 0.99,
        "p80_us": median * 1.01,
        "throughput": gbps,
        "throughput_unit": "GB/s",
        "provenance": {
            "nvml_before": {
                "sm_clock_mhz": 1980,
                "mem_clock_mhz": 3201,
                "temperature_c": 41,
                "power_w": 118.5,
                "throttle_mask": 4,
                "throttle": ["software power cap"],
                "pids": [4242],
            },
            "nvml_after": {"sm_clock_mhz": 1965, "temperature_c": 44, "throttle": []},
        },
    }


def tune_reduce_sweep(api: Any) -> dict[str, Any]:
    """A reduce job over three K on the H200, uploaded as a worker would."""
    problems = [{"m": 2**22 // k, "k": k, "kind": "sum"} for k in KS]
    job = api.submit(op="reduce", dtype="f16", problems=problems, device={"backend": "cuda"})
    worker = api.register(H200)
    for _ in KS:
        lease = api.lease(worker, ("cuda",))
        k = lease["task"]["problem"]["k"]
        items = [
            row_measurement(pack, strategy, threads, k, 1000.0 + 100 * pack + threads + k / 100)
            for pack in (2, 4)
            for strategy in ("warp", "block")
            for threads in (128, 256)
        ]
        items.append({**row_measurement(8, "warp", 128, k, 1.0), "outcome": "wrong_result"})
        api.upload(lease["lease_id"], items, device=H200)
    return api.get_job(job["id"])


def page(api: Any, path: str, status: int = 200) -> str:
    response = api.client.get(path)
    assert response.status_code == status, response.text
    return response.text


def test_jobs_page_lists_jobs_and_refreshes_only_while_one_runs(api: Any) -> None:
    queued = api.submit()
    text = page(api, "/ui/jobs")
    assert f'href="/ui/jobs/{queued["id"]}"' in text
    assert 'http-equiv="refresh"' in text and "<progress" in text
    api.client.delete(f"/v1/jobs/{queued['id']}", headers=api.harness.submit)
    assert 'http-equiv="refresh"' not in page(api, "/ui/jobs")
    assert queued["id"][:12] not in page(api, "/ui/jobs?status=done")


def test_job_page_lists_every_candidate_and_draws_a_line_per_pack_and_strategy(
    api: Any, settings: Settings
) -> None:
    job = tune_reduce_sweep(api)
    text = page(api, f"/ui/jobs/{job['id']}")
    assert 'http-equiv="refresh"' not in text  # finished
    assert text.count('<tr class="candidate') == len(KS) * 9
    assert text.count("outcome-wrong_result") == len(KS)
    assert text.count(' winner"') == len(KS)
    lines = re.findall(r'<polyline class="series" data-series="([^"]+)"', text)
    assert sorted(lines) == [
        "pack=2 strategy=block",
        "pack=2 strategy=warp",
        "pack=4 strategy=block",
        "pack=4 strategy=warp",
    ]
    assert 'class="ceiling"' not in text and "TUNEHUB_COPY_GBPS" in text

    settings.copy_gbps = {"H200": 4125.0}
    drawn = page(api, f"/ui/jobs/{job['id']}")
    assert 'class="ceiling" data-value="4125.0"' in drawn
    assert "TUNEHUB_COPY_GBPS[&#39;H200&#39;]" in drawn


def test_gemm_job_page_draws_every_variant_and_the_vendor_baselines(
    api: Any, settings: Settings, tmp_path: Path
) -> None:
    shape = {"m": 128, "n": 4096, "k": 4096}
    items = [
        api.measurement(name, median, throughput=tflops, throughput_unit="TFLOP/s")
        for name, median, tflops in (("gemm_64x64", 14.0, 300.0), ("gemm_128x256", 30.0, 140.0))
    ]
    job = api.tune(items, device=H200, op="gemm", dtype="f16", problems=[shape])
    text = page(api, f"/ui/jobs/{job['id']}")
    bars = re.findall(r'<rect class="series (\w+)" data-series="([^"]+)"', text)
    assert sorted(bars) == [("variant", "gemm_128x256"), ("winner", "gemm_64x64")]
    assert "no vendor baselines" in text

    bench = {
        "meta": {"device": "NVIDIA H200", "date": "2026-12-02"},
        "copy_gbps": 4125.0,
        "rows": [{"suite": "gemm", "problem": shape, "unit": "TFLOP/s",
                  "metric": {"tunehub": 316.0, "cublas": 296.8, "triton": 133.1}}],
    }  # fmt: skip
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(bench))
    settings.ui_benchmark_file = path
    text = page(api, f"/ui/jobs/{job['id']}")
    baselines = re.findall(r'<rect class="series baseline" data-series="([^"]+)"', text)
    assert sorted(baselines) == ["vendor: cublas", "vendor: triton"]
    assert "h200.json (NVIDIA H200, 2026-12-02)" in text


def test_measurement_page_shows_clocks_temperature_power_and_throttle_reasons(api: Any) -> None:
    job = tune_reduce_sweep(api)
    measurements = api.client.get("/v1/measurements", params={"job_id": job["id"]}).json()
    first = measurements["measurements"][0]
    text = page(api, f"/ui/measurements/{first['id']}")
    assert text.count('<tr class="reading">') == 2
    for expected in ("1980", "3201", "41", "118.5", "software power cap", "4242", "sm_90"):
        assert expected in text
    assert "none" in text  # the after reading had no throttle reason
    page(api, "/ui/measurements/999999", status=404)
    assert "not found" in page(api, "/ui/jobs/nope", status=404)


def test_best_page_filters_by_device_op_and_toolchain_and_lists_client_results(
    api: Any,
) -> None:
    api.tune([api.measurement("reduce_cpu_p4", 20.0)])
    tune_reduce_sweep(api)
    everything = page(api, "/ui/best")
    assert everything.count('<tr class="best">') == 1 + len(KS)
    cuda = page(api, "/ui/best?device=cuda:NVIDIA H200:sm_90:132")
    assert cuda.count('<tr class="best">') == len(KS) and "reduce_cpu_p4" not in cuda
    assert page(api, "/ui/best?op=gemm").count('<tr class="best">') == 0
    assert page(api, "/ui/best?toolchain=nope").count('<tr class="best">') == 0
    upload = {
        "op": "triton:" + "c" * 64,
        "kernel_name": "softmax_kernel",
        "key": {"n_cols": 1024},
        "device": H200,
        "toolchain": {"compiler": "triton 3.6.0", "template_version": "c" * 64},
        "measurements": [{"config_name": "num_warps=8", "params": {}, "median_us": 5.0}],
        "provenance": {"timer": "triton_do_bench"},
    }
    assert api.client.post("/v1/client-results", json=upload, headers=api.harness.submit).is_success
    text = page(api, "/ui/best")
    assert text.count('<tr class="client-best">') == 1 and "triton_do_bench" in text


def test_text_from_uploads_is_escaped(api: Any) -> None:
    evil = api.measurement("<script>alert(1)</script>", 10.0, params={"x": "<img src=x>"})
    job = api.tune([evil])
    text = page(api, f"/ui/jobs/{job['id']}")
    assert "<script>alert" not in text and "&lt;script&gt;" in text
    assert "<img src=x>" not in text


def test_line_grouping_follows_the_family_params() -> None:
    def m(vid: str, params: dict[str, Any], k: int, gbps: float) -> dict[str, Any]:
        problem = {"m": 64, "k": k}
        return {"variant_id": vid, "variant_name": vid, "params": params, "outcome": "ok",
                "problem": problem, "throughput": gbps, "throughput_unit": "GB/s"}  # fmt: skip

    cpu = [
        m(f"p{p}a{a}", {"pack": p, "acc": a, "unroll": 2}, k, p * 10.0 + a + k / 1000)
        for p in (4, 8)
        for a in (1, 2)
        for k in (256, 1024)
    ]
    series, names = bandwidth_series(cpu)
    assert names == ["pack"]
    assert [s.label for s in series] == ["pack=4", "pack=8"]
    assert [p[1] for p in sorted(series[0].points)] == [42.256, 43.024]  # best acc per K

    # a param derived from the shape (same variant, other value per problem) names no line
    derived = [m("v1", {"tile": 64, "cols": k // 64}, k, 1.0) for k in (256, 1024)]
    assert problem_varying_params(derived) == {"cols"}
    assert line_params(derived) == ["tile"]
