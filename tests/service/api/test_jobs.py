"""``/v1/jobs``: the submit contract, bad inputs (422 naming the field, nothing stored), 404s."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from service.store.models import Job, Task


def _counts(app_client: Any) -> tuple[int, int]:
    with app_client.sessionmaker() as session:
        jobs = session.scalar(select(func.count()).select_from(Job))
        tasks = session.scalar(select(func.count()).select_from(Task))
    return jobs, tasks


def test_submit_returns_202_with_one_task_per_problem(api: Any) -> None:
    body = api.submit(
        op="gemm",
        dtype="f16",
        problems=[{"m": 128, "n": 256, "k": 64}, {"m": 16, "n": 4096, "k": 4096}],
        device={"backend": "cuda", "name": "H200", "arch": "sm_90"},
        strategy="tpe",
        budget={"max_variants": 20, "max_seconds": 60},
        seed=7,
    )
    assert body["status"] == "queued"
    assert body["total_tasks"] == 2
    assert body["layout"] == "rcr"  # the op's default
    assert body["device"] == {"backend": "cuda", "name": "H200", "arch": "sm_90"}
    assert body["progress"] == {
        "tasks_done": 0,
        "tasks_total": 2,
        "candidates_done": 0,
        "candidates_total": 0,
    }
    assert [p["problem"] for p in body["problems"]] == [
        {"m": 128, "n": 256, "k": 64},
        {"m": 16, "n": 4096, "k": 4096},
    ]
    assert all(p["status"] == "queued" and p["winner"] is None for p in body["problems"])


def test_get_and_list_jobs(api: Any) -> None:
    first = api.submit()
    second = api.submit(op="softmax", dtype="f16", problems=[{"m": 8, "k": 1024}])
    shown = api.get_job(first["id"])
    assert shown["id"] == first["id"] and shown["op"] == "reduce"
    assert shown["problems"][0]["problem"] == {"m": 1024, "k": 4096, "kind": "sum"}
    listed = api.client.get("/v1/jobs").json()["jobs"]
    assert {j["id"] for j in listed} == {first["id"], second["id"]}
    only_softmax = api.client.get("/v1/jobs", params={"op": "softmax"}).json()["jobs"]
    assert [j["id"] for j in only_softmax] == [second["id"]]
    assert api.client.get("/v1/jobs", params={"status": "done"}).json()["jobs"] == []
    assert len(api.client.get("/v1/jobs", params={"limit": 1}).json()["jobs"]) == 1
    assert api.client.get("/v1/jobs", params={"status": "bogus"}).status_code == 422


def test_unknown_job_is_404(api: Any) -> None:
    assert api.client.get("/v1/jobs/nope").status_code == 404
    assert api.client.get("/v1/jobs/" + "f" * 32).status_code == 404
    response = api.client.delete("/v1/jobs/nope", headers=api.harness.submit)
    assert response.status_code == 404
    assert "not found" in response.json()["detail"]


def test_cancel_marks_unfinished_tasks_cancelled(api: Any) -> None:
    job = api.submit(problems=[{"m": 8, "k": 8}, {"m": 16, "k": 16}])
    response = api.client.delete(f"/v1/jobs/{job['id']}", headers=api.harness.submit)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "cancelled"
    assert {p["status"] for p in body["problems"]} == {"cancelled"}
    # cancelling again is harmless
    again = api.client.delete(f"/v1/jobs/{job['id']}", headers=api.harness.submit)
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


BAD_BODIES = [
    ({"problems": [{"m": 0, "k": 8}]}, ["body", "problems", 0, "m"]),
    ({"problems": [{"m": 8, "k": -3}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": 8, "k": 2.5}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": "8", "k": 8}]}, ["body", "problems", 0, "m"]),
    ({"problems": [{"m": True, "k": 8}]}, ["body", "problems", 0, "m"]),
    ({"problems": [{"m": 8, "k": 1 << 25}]}, ["body", "problems", 0, "k"]),
    ({"problems": [{"m": 1 << 20, "k": 1 << 20}]}, ["body", "problems", 0, "x"]),
    (
        {"problems": [{"m": 8, "k": 8}, {"m": 8, "k": 8, "kind": "median"}]},
        ["body", "problems", 1, "kind"],
    ),
    ({"problems": [{"m": 8, "k": 8, "extra": 1}]}, ["body", "problems", 0, "extra"]),
    ({"problems": [{"m": 8}]}, ["body", "problems", 0, "k"]),
    ({"problems": ["m=8"]}, ["body", "problems", 0]),
    ({"problems": []}, ["body", "problems"]),
    ({"problems": [{"m": 8, "k": 8}] * 257}, ["body", "problems"]),
    ({"op": "matmul"}, ["body", "op"]),
    ({"dtype": "f64"}, ["body", "dtype"]),
    ({"layout": "rcr"}, ["body", "layout"]),
    ({"strategy": "annealing"}, ["body", "strategy"]),
    ({"objective": "joy"}, ["body", "objective"]),
    # the CPU backend has no energy counter: refused at submission, not failed in the engine
    ({"objective": "energy", "device": {"backend": "cpu"}}, ["body", "objective"]),
    ({"device": {"backend": "tpu"}}, ["body", "device", "backend"]),
    ({"device": {"backend": "cpu", "colour": "red"}}, ["body", "device", "colour"]),
    ({"budget": {"max_variants": 0}}, ["body", "budget", "max_variants"]),
    ({"budget": {"max_variants": 10**9}}, ["body", "budget", "max_variants"]),
    ({"budget": {"max_variants": 1.5}}, ["body", "budget", "max_variants"]),
    ({"budget": {"max_seconds": -1}}, ["body", "budget", "max_seconds"]),
    ({"budget": {"max_seconds": 1e12}}, ["body", "budget", "max_seconds"]),
    ({"seed": -1}, ["body", "seed"]),
    ({"priority": 3}, ["body", "priority"]),
]


@pytest.mark.parametrize(("override", "loc"), BAD_BODIES)
def test_bad_submissions_are_422_naming_the_field_and_store_nothing(
    api: Any, override: dict[str, Any], loc: list[Any]
) -> None:
    response = api.client.post(
        "/v1/jobs", json=api.job_body(**override), headers=api.harness.submit
    )
    assert response.status_code == 422, response.text
    locs = [error["loc"] for error in response.json()["detail"]]
    assert loc in locs, locs
    assert _counts(api.harness) == (0, 0)


def test_gemm_layout_is_checked_against_the_op(api: Any) -> None:
    ok = api.submit(op="gemm", problems=[{"m": 8, "n": 8, "k": 8}], layout="crr")
    assert ok["layout"] == "crr"
    response = api.client.post(
        "/v1/jobs",
        json=api.job_body(op="gemm", problems=[{"m": 8, "n": 8, "k": 8}], layout="nhwc"),
        headers=api.harness.submit,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "layout"]


def test_conv2d_with_an_empty_output_is_rejected(api: Any) -> None:
    problem = {"n": 1, "h": 2, "w": 2, "c": 8, "k": 8, "r": 5, "s": 5}
    response = api.client.post(
        "/v1/jobs",
        json=api.job_body(op="conv2d", dtype="f16", problems=[problem]),
        headers=api.harness.submit,
    )
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"][:3] == ["body", "problems", 0]


def test_energy_on_the_cpu_backend_says_why(api: Any) -> None:
    body = api.job_body(objective="energy")
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "objective"] and "energy counter" in error["msg"]
    listed = api.client.get("/v1/jobs", headers=api.harness.submit).json()["jobs"]
    assert listed == []
