"""grouped_gemm through the service (issue 26 item 2): 422s naming the field over REST (jobs,
best, the batch query's per-query error), a job on a backend without grouped variants refused
at submission, exit 2 in the CLI, and answers per token bucket (exact, then nearest across
buckets)."""

from __future__ import annotations

from typing import Any

import pytest

from service.cli import main
from service.cli.output import best_answer_lines
from service.schemas.configs import BestConfigOut
from service.settings import get_settings

DOWN = "http://127.0.0.1:1"
GROUPED = {"op": "grouped_gemm", "dtype": "bf16"}
CUDA = {"backend": "cuda", "name": "H200", "arch": "sm_90"}
MIXTRAL = {"experts": 8, "n": 14336, "k": 4096}

BAD = [
    ({"experts": 0, "n": 64, "k": 64, "tokens": 8}, "experts"),
    ({"experts": 257, "n": 64, "k": 64, "tokens": 8}, "experts"),
    ({"experts": 8, "n": 60, "k": 64, "tokens": 8}, "n"),
    ({"experts": 8, "n": 64, "k": 66, "tokens": 8}, "k"),
    ({"experts": 8, "n": 64, "k": 64, "tokens": 0}, "tokens"),
    ({"experts": 8, "n": 64, "k": 64, "tokens": 8, "skew": 3}, "skew"),
    ({"experts": 8, "n": 64, "k": 64}, "tokens"),
]


@pytest.mark.parametrize(("problem", "field"), BAD)
def test_a_bad_grouped_problem_is_a_422_naming_the_field(
    api: Any, problem: dict[str, Any], field: str
) -> None:
    body = api.job_body(**GROUPED, problems=[problem], device=CUDA)
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    locs = [error["loc"] for error in response.json()["detail"]]
    assert ["body", "problems", 0, field] in locs, locs
    answer = api.best(**GROUPED, **problem)
    assert answer.status_code == 422, answer.text
    assert ["query", field] in [e["loc"] for e in answer.json()["detail"]]
    batch = api.client.post(
        "/v1/configs/query", json={"queries": [{**GROUPED, "problem": problem}]}
    )
    assert batch.status_code == 200, batch.text
    (result,) = batch.json()["results"]
    assert result["result"] is None and f"problem.{field}" in result["error"], result


def test_a_job_on_a_backend_without_grouped_variants_is_refused_at_submission(api: Any) -> None:
    problem = {**MIXTRAL, "tokens": 16}
    body = api.job_body(**GROUPED, problems=[problem], device={"backend": "cpu"})
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "device", "backend"] and "grouped_gemm" in error["msg"]
    assert api.client.get("/v1/jobs").json()["jobs"] == []  # nothing stored


def test_grouped_gemm_refuses_f32(api: Any) -> None:
    problem = {**MIXTRAL, "tokens": 16}
    body = api.job_body(op="grouped_gemm", dtype="f32", problems=[problem], device=CUDA)
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    assert ["body", "dtype"] in [e["loc"] for e in response.json()["detail"]]


def test_a_cuda_job_stores_the_bucket_as_its_problem(api: Any) -> None:
    body = api.submit(**GROUPED, problems=[{**MIXTRAL, "tokens": 100, "skew": 2}], device=CUDA)
    (status,) = body["problems"]
    assert status["problem"] == {**MIXTRAL, "tokens": 128, "skew": 2}


def _tune_bucket(api: Any, tokens: int, skew: int, name: str, median: float) -> None:
    api.tune(
        [api.measurement(name, median)],
        device=api.H200,
        problems=[{**MIXTRAL, "tokens": tokens, "skew": skew}],
        **GROUPED,
    )


def test_a_batch_is_answered_from_its_bucket_then_the_nearest_bucket(api: Any) -> None:
    _tune_bucket(api, 16, 1, "decode_winner", 400.0)
    _tune_bucket(api, 4096, 1, "prefill_winner", 1500.0)
    # 12 tokens over 8 experts (max 2, mean 1.5): bucket tokens 16, skew 2 -> not tuned;
    # the nearest tuned bucket answers, and says so
    near = api.best(**GROUPED, device="H200", **MIXTRAL, tokens=12, skew=2)
    assert near.status_code == 200, near.text
    body = near.json()
    assert body["exact"] is False and body["variant_name"] == "decode_winner"
    assert body["tuned_problem"] == {**MIXTRAL, "tokens": 16, "skew": 1}
    exact = api.best(**GROUPED, device="H200", **MIXTRAL, tokens=3000, skew=1).json()
    assert exact["exact"] is True and exact["variant_name"] == "prefill_winner"
    lines = best_answer_lines(BestConfigOut.model_validate(body))
    assert any("tokens=16" in line and "nearest" in line for line in lines), lines


def test_the_ui_shows_a_grouped_job_and_its_bucket(api: Any) -> None:
    _tune_bucket(api, 512, 2, "mid_winner", 700.0)
    (job,) = api.client.get("/v1/jobs").json()["jobs"]
    page = api.client.get(f"/ui/jobs/{job['id']}")
    assert page.status_code == 200, page.text
    assert "grouped_gemm" in page.text and "mid_winner" in page.text
    assert api.client.get("/ui/best?op=grouped_gemm").status_code == 200


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["tune", "grouped_gemm", "--experts", "0", "--n", "64", "--k", "64", "--tokens", "8"],
            "experts",
        ),
        (
            [
                "tune",
                "grouped_gemm",
                "--experts",
                "8",
                "--n",
                "64",
                "--k",
                "64",
                "--tokens",
                "8",
                "--skew",
                "3",
            ],
            "skew",
        ),
        (
            ["best", "grouped_gemm", "--experts", "8", "--n", "64", "--k", "66", "--tokens", "8"],
            "k",
        ),
        (
            ["best", "grouped_gemm", "--experts", "8", "--n", "64", "--k", "64", "--tokens", "0"],
            "tokens",
        ),
        (
            [
                "tune",
                "grouped_gemm",
                "--experts",
                "8",
                "--n",
                "64",
                "--k",
                "64",
                "--tokens",
                "8",
                "--backend",
                "cpu",
            ],
            "no variants on the cpu backend",
        ),
        (
            [
                "tune",
                "grouped_gemm",
                *("--experts", "8", "--n", "64", "--k", "64", "--tokens", "8"),
                *("--dtype", "f32", "--backend", "cuda"),
            ],
            "dtype",
        ),
    ],
)
def test_the_cli_refuses_a_bad_grouped_problem_with_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    get_settings.cache_clear()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--server", DOWN])
    _, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert expected in err and "Traceback" not in err
