"""The FP8 scaled_gemm op through the service and the CLI: jobs (202 on cuda; bad shapes,
scalings, out dtypes and dtypes a 422 naming the field; a cpu job a 422: no cpu space), best
and the batch query (same checks), a worker's upload answered by best, and the CLI's exit 2."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.cli.test_cli import DOWN, one_error_line, run_cli
from tuner.problems import ScaledGemmProblem
from tuner.spaces.cuda_scaled_gemm import CudaScaledGemmSpace

H200 = {"backend": "cuda", "name": "NVIDIA H200", "arch": "sm_90", "sm_count": 132}
SPACE = CudaScaledGemmSpace()
DECODE = {
    "library": "tunehub",
    "family": "decode_fp8",
    "out_dtype": "bf16",
    "scaling": "block",
    "m_tile": 8,
    "rows": 2,
    "warps": 4,
    "unroll": 4,
    "splits": 1,
}


def _job(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "op": "scaled_gemm",
        "dtype": "e4m3",
        "problems": [{"m": 8, "n": 4096, "k": 4096, "scaling": "block"}],
        "device": {"backend": "cuda"},
    }
    return {**body, **overrides}


def test_submit_a_scaled_gemm_job(api: Any) -> None:
    body = api.submit(
        **_job(
            problems=[
                {"m": 1, "n": 3584, "k": 3584},
                {"m": 2048, "n": 256, "k": 512, "out_dtype": "f16", "scaling": "block"},
            ]
        )
    )  # noqa: E501
    assert body["op"] == "scaled_gemm" and body["dtype"] == "e4m3" and body["layout"] == "rcr"
    assert [p["problem"] for p in body["problems"]] == [
        {"m": 1, "n": 3584, "k": 3584, "out_dtype": "bf16", "scaling": "per_tensor"},
        {"m": 2048, "n": 256, "k": 512, "out_dtype": "f16", "scaling": "block"},
    ]


BAD = [
    (
        {"problems": [{"m": 8, "n": 4096, "k": 4000, "scaling": "block"}]},
        ["body", "problems", 0, "k"],
    ),  # noqa: E501
    (
        {"problems": [{"m": 8, "n": 4000, "k": 4096, "scaling": "block"}]},
        ["body", "problems", 0, "n"],
    ),  # noqa: E501
    ({"problems": [{"m": 8, "n": 4096, "k": 4104}]}, ["body", "problems", 0, "k"]),
    (
        {"problems": [{"m": 8, "n": 64, "k": 64, "out_dtype": "f32"}]},
        ["body", "problems", 0, "out_dtype"],
    ),  # noqa: E501
    (
        {"problems": [{"m": 8, "n": 64, "k": 64, "scaling": "row"}]},
        ["body", "problems", 0, "scaling"],
    ),  # noqa: E501
    ({"problems": [{"m": 8, "n": 64, "k": 64, "scaling": 1}]}, ["body", "problems", 0, "scaling"]),
    ({"dtype": "bf16"}, ["body", "dtype"]),
    ({"layout": "rrr"}, ["body", "layout"]),
    ({"device": {"backend": "cpu"}}, ["body", "device", "backend"]),
]


@pytest.mark.parametrize(("override", "loc"), BAD)
def test_bad_scaled_gemm_jobs_are_422_naming_the_field(
    api: Any, override: dict[str, Any], loc: list[Any]
) -> None:
    response = api.client.post("/v1/jobs", json=_job(**override), headers=api.harness.submit)
    assert response.status_code == 422, response.text
    locs = [error["loc"] for error in response.json()["detail"]]
    assert loc in locs, locs
    assert api.client.get("/v1/jobs", params={"op": "scaled_gemm"}).json()["jobs"] == []


def test_e4m3_is_refused_for_the_other_ops(api: Any) -> None:
    body = {"op": "gemm", "dtype": "e4m3", "problems": [{"m": 8, "n": 8, "k": 8}],
            "device": {"backend": "cuda"}}  # fmt: skip
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422
    assert ["body", "dtype"] in [e["loc"] for e in response.json()["detail"]]


def _variant(params: dict[str, Any], tflops: float) -> dict[str, Any]:
    name = SPACE.name(params, "e4m3", "rcr")
    median = ScaledGemmProblem(8, 4096, 4096, "bf16", "block").flops() / tflops / 1e6
    return {
        "variant_id": f"sha-{name}",
        "variant_name": name,
        "params": params,
        "outcome": "ok",
        "median_us": median,
        "p20_us": median * 0.99,
        "p80_us": median * 1.01,
        "throughput": tflops,
        "throughput_unit": "TFLOP/s",
    }


def test_best_answers_an_uploaded_winner_and_checks_like_jobs(api: Any) -> None:
    slower = {**DECODE, "rows": 1}
    job = api.tune(
        [_variant(DECODE, 60.0), _variant(slower, 40.0)],
        device=H200,
        **{k: v for k, v in _job().items() if k != "device"},
    )
    assert job["status"] == "done", job
    query = {"op": "scaled_gemm", "dtype": "e4m3", "device": "H200", "m": 8, "n": 4096}
    exact = api.best(**query, k=4096, scaling="block")
    assert exact.status_code == 200, exact.text
    assert exact.json()["params"] == DECODE and exact.json()["exact"] is True
    # another scaling is another problem: not answered from this one
    assert api.best(**query, k=4096).status_code == 404
    for extra, field in (
        ({"k": 4000, "scaling": "block"}, "k"),
        ({"k": 4096, "scaling": "rows"}, "scaling"),
        ({"k": 4096, "out_dtype": "e4m3"}, "out_dtype"),
    ):
        response = api.best(**query, **extra)
        assert response.status_code == 422, response.text
        assert ["query", field] in [e["loc"] for e in response.json()["detail"]]
    wrong_dtype = api.best(**{**query, "dtype": "bf16"}, k=4096)
    assert wrong_dtype.status_code == 422
    assert ["query", "dtype"] in [e["loc"] for e in wrong_dtype.json()["detail"]]
    queries = [
        {"op": "scaled_gemm", "dtype": "e4m3", "device": "H200",
         "problem": {"m": 8, "n": 4096, "k": 4096, "scaling": "block"}},
        {"op": "scaled_gemm", "dtype": "e4m3", "problem": {"m": 8, "n": 4096, "k": 4000, "scaling": "block"}},  # noqa: E501
        {"op": "scaled_gemm", "dtype": "f16", "problem": {"m": 8, "n": 4096, "k": 4096}},
    ]  # fmt: skip
    results = api.client.post("/v1/configs/query", json={"queries": queries}).json()["results"]
    assert results[0]["result"]["params"] == DECODE
    assert results[1]["result"] is None and "problem.k" in results[1]["error"]
    assert results[2]["result"] is None and "dtype" in results[2]["error"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["tune", "scaled_gemm", "--m", "8", "--n", "4096", "--k", "4000", "--scaling", "block"],
            "k: must be a multiple of 128",
        ),  # noqa: E501
        (
            ["tune", "scaled_gemm", "--m", "8", "--n", "4000", "--k", "4096", "--scaling", "block"],
            "n: must be a multiple of 128",
        ),  # noqa: E501
        (
            ["tune", "scaled_gemm", "--m", "8", "--n", "64", "--k", "40"],
            "k: must be a multiple of 16",
        ),  # noqa: E501
        (
            ["tune", "scaled_gemm", "--m", "8", "--n", "64", "--k", "64", "--out-dtype", "f32"],
            "out_dtype",
        ),  # noqa: E501
        (
            ["tune", "scaled_gemm", "--m", "8", "--n", "64", "--k", "64", "--scaling", "row"],
            "scaling",
        ),  # noqa: E501
        (["tune", "scaled_gemm", "--m", "8", "--n", "64", "--k", "64", "--dtype", "bf16"], "dtype"),  # noqa: E501
        (["tune", "gemm", "--m", "8", "--n", "64", "--k", "64", "--dtype", "e4m3"], "dtype"),
        (
            ["best", "scaled_gemm", "--m", "8", "--n", "64", "--k", "40"],
            "k: must be a multiple of 16",
        ),  # noqa: E501
        (
            ["best", "scaled_gemm", "--m", "8", "--n", "64", "--k", "64", "--scaling", "x"],
            "scaling",
        ),  # noqa: E501
    ],
)
def test_cli_user_errors_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli([*args, "--server", DOWN], capsys)
    assert code == 2
    line = one_error_line(err)
    assert expected in line, line
