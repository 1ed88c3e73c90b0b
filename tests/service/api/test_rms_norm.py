"""The rms_norm op through the service: jobs (202; bad dims a 422 naming the field, nothing
stored), a worker's upload answered by ``best`` (exact and nearest), and the UI's bandwidth plot.
The real CPU tuning over HTTP is in test_end_to_end.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import func, select

from service.store.models import Job, Task
from tuner.problems import RmsNormProblem
from tuner.spaces.cuda_rms_norm import CudaRmsNormSpace

H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132}
SPACE = CudaRmsNormSpace()


def _rms_job(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "op": "rms_norm",
        "dtype": "f16",
        "problems": [{"m": 8, "k": 4096}],
        "device": {"backend": "cuda"},
    }
    return {**body, **overrides}


def _variant(params: dict[str, Any], m: int, k: int, gbps: float) -> dict[str, Any]:
    name = SPACE.name(params, "f16", "row")
    median = RmsNormProblem(m=m, k=k).bytes_moved(2) / gbps / 1e3
    return {
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": params,
        "outcome": "ok",
        "median_us": median,
        "p20_us": median * 0.99,
        "p80_us": median * 1.01,
        "throughput": gbps,
        "throughput_unit": "GB/s",
    }


def test_submit_an_rms_norm_job(api: Any) -> None:
    body = api.submit(**_rms_job(problems=[{"m": 1, "k": 4096}, {"m": 2048, "k": 4096}]))
    assert body["op"] == "rms_norm" and body["layout"] == "row"  # the op's only layout
    assert body["total_tasks"] == 2
    assert [p["problem"] for p in body["problems"]] == [
        {"m": 1, "k": 4096},
        {"m": 2048, "k": 4096},
    ]
    listed = api.client.get("/v1/jobs", params={"op": "rms_norm"}).json()["jobs"]
    assert [j["id"] for j in listed] == [body["id"]]


BAD = [
    ({"problems": [{"m": 0, "k": 4096}]}, ["body", "problems", 0, "m"]),
    ({"problems": [{"m": 8, "k": -1}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": 8, "k": 1 << 25}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": 8, "k": "4096"}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": 8}]}, ["body", "problems", 0, "k"]),
    # eps is a run-time value of the kernel, not a dim of the problem
    ({"problems": [{"m": 8, "k": 4096, "eps": 1e-5}]}, ["body", "problems", 0, "eps"]),
    ({"problems": [{"m": 8, "k": 4096, "kind": "sum"}]}, ["body", "problems", 0, "kind"]),
    ({"problems": [{"m": 1 << 20, "k": 1 << 20}]}, ["body", "problems", 0, "x"]),
    ({"layout": "rcr"}, ["body", "layout"]),
]


@pytest.mark.parametrize(("override", "loc"), BAD)
def test_bad_rms_norm_jobs_are_422_naming_the_field(
    api: Any, override: dict[str, Any], loc: list[Any]
) -> None:
    response = api.client.post("/v1/jobs", json=_rms_job(**override), headers=api.harness.submit)
    assert response.status_code == 422, response.text
    locs = [error["loc"] for error in response.json()["detail"]]
    assert loc in locs, locs
    with api.harness.sessionmaker() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
        assert session.scalar(select(func.count()).select_from(Task)) == 0


def test_best_answers_an_uploaded_winner_exactly_and_for_a_near_shape(api: Any) -> None:
    block = {"pack": 8, "strategy": "block", "group": 512, "threads": 512, "mode": "reg"}
    warp = {**block, "strategy": "warp", "group": 32, "threads": 128}
    job = api.tune(
        [_variant(block, 8, 4096, 900.0), _variant(warp, 8, 4096, 600.0)],
        device=H200,
        op="rms_norm",
        dtype="f16",
        problems=[{"m": 8, "k": 4096}],
    )
    assert job["status"] == "done"
    assert job["problems"][0]["winner"]["variant_name"] == "rms_norm_f16_p8_block_t512_reg"
    exact = api.best(op="rms_norm", dtype="f16", device="H200", m=8, k=4096)
    assert exact.status_code == 200, exact.text
    answer = exact.json()
    assert answer["exact"] is True and answer["params"] == block
    near = api.best(op="rms_norm", dtype="f16", device="H200", m=16, k=4096).json()
    assert near["exact"] is False and near["tuned_problem"] == {"m": 8, "k": 4096}
    missing = api.best(op="rms_norm", dtype="f16", device="H200", m=8)
    assert missing.status_code == 422
    assert api.best(op="rms_norm", dtype="bf16", device="H200", m=8, k=4096).status_code == 404


def test_the_job_page_plots_gb_per_s_per_pack_and_strategy(api: Any) -> None:
    problems = [{"m": 2048, "k": k} for k in (2048, 4096)]
    job = api.submit(**_rms_job(problems=problems))
    worker = api.register(H200)
    for _ in problems:
        lease = api.lease(worker, ("cuda",))
        k = lease["task"]["problem"]["k"]
        items = [
            _variant(
                {"pack": pack, "strategy": s, "group": g, "threads": 256, "mode": "reg"},
                2048,
                k,
                1000.0 + 100 * pack + k / 100,
            )
            for pack in (4, 8)
            for s, g in (("block", 256), ("warp", 32))
        ]
        api.upload(lease["lease_id"], items, device=H200)
    text = api.client.get(f"/ui/jobs/{job['id']}").text
    lines = re.findall(r'<polyline class="series" data-series="([^"]+)"', text)
    assert sorted(lines) == [
        "pack=4 strategy=block",
        "pack=4 strategy=warp",
        "pack=8 strategy=block",
        "pack=8 strategy=warp",
    ]
