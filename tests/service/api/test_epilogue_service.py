"""Fused epilogues through the service (issue 26, item 3): 422s naming the field over REST,
exit 2 in the CLI, and a real CPU tune of a fused gemm and conv2d (live server + CPU worker)
whose answer says what was fused."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from service.agent import WorkerAgent
from service.cli import main
from service.cli.output import best_answer_lines
from service.client import ApiError, TunehubClient
from service.schemas.configs import BestConfigOut, ConfigQuery
from service.schemas.jobs import JobCreate
from service.settings import get_settings
from tests.service.e2e.test_end_to_end import LiveServer, engine_config, live_server  # noqa: F401

DOWN = "http://127.0.0.1:1"
CONV = {"n": 1, "h": 8, "w": 8, "c": 8, "k": 16, "r": 3, "s": 3, "stride": 1, "pad": 1}

BAD_PROBLEMS = [
    ("gemm", {"m": 8, "n": 8, "k": 8, "epilogue": "tanh"}, "epilogue"),
    ("gemm", {"m": 8, "n": 8, "k": 8, "epilogue": 1}, "epilogue"),
    ("gemm", {"m": 8, "n": 7, "k": 8, "epilogue": "gated_silu"}, "n"),
    ("conv2d", {**CONV, "epilogue": "gated_silu"}, "epilogue"),
    ("reduce", {"m": 8, "k": 8, "epilogue": "bias"}, "epilogue"),
]


@pytest.mark.parametrize(("op", "problem", "field"), BAD_PROBLEMS)
def test_a_bad_epilogue_is_a_422_naming_the_field(
    api: Any, op: str, problem: dict[str, Any], field: str
) -> None:
    body = api.job_body(op=op, problems=[problem])
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    locs = [error["loc"] for error in response.json()["detail"]]
    assert ["body", "problems", 0, field] in locs, locs
    answer = api.best(op=op, dtype="f32", **problem)
    assert answer.status_code == 422, answer.text
    assert ["query", field] in [e["loc"] for e in answer.json()["detail"]]


def test_a_fused_submission_keeps_its_epilogue_in_the_problem(api: Any) -> None:
    body = api.submit(
        op="gemm",
        dtype="f16",
        problems=[
            {"m": 16, "n": 4096, "k": 4096},
            {"m": 16, "n": 4096, "k": 4096, "epilogue": "bias_gelu"},
        ],
        device={"backend": "cuda", "name": "H200", "arch": "sm_90"},
    )
    problems = [p["problem"] for p in body["problems"]]
    assert problems == [
        {"m": 16, "n": 4096, "k": 4096},
        {"m": 16, "n": 4096, "k": 4096, "epilogue": "bias_gelu"},
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--epilogue", "tanh"], "epilogue"),
        (
            ["tune", "gemm", "--m", "8", "--n", "7", "--k", "8", "--epilogue", "gated_silu"],
            "n must be even",
        ),
        (
            [
                "best",
                "conv2d",
                *(f"--{k}={v}" for k, v in CONV.items()),
                "--epilogue",
                "gated_silu",
            ],
            "epilogue",
        ),
    ],
)
def test_the_cli_refuses_a_bad_epilogue_with_exit_2(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    get_settings.cache_clear()
    with pytest.raises(SystemExit) as exited:
        main([*args, "--server", DOWN])
    _, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert expected in err and "Traceback" not in err


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize(
    ("op", "dtype", "problem"),
    [
        ("gemm", "f16", {"m": 24, "n": 64, "k": 48, "epilogue": "gated_silu"}),
        ("conv2d", "f32", {**CONV, "epilogue": "bias_relu"}),
    ],
)
def test_a_fused_problem_tunes_on_the_cpu_and_its_answer_says_what_was_fused(
    live_server: LiveServer,  # noqa: F811
    tmp_path: Path,
    op: str,
    dtype: str,
    problem: dict[str, Any],
) -> None:
    user = TunehubClient(live_server.url, live_server.admin_token)
    job = user.submit_job(
        JobCreate.model_validate(
            {
                "op": op,
                "dtype": dtype,
                "problems": [problem],
                "device": {"backend": "cpu"},
                "budget": {"max_variants": 2},
            }
        )
    )
    agent = WorkerAgent(
        TunehubClient(live_server.url, live_server.worker_token),
        engine_config(tmp_path / "cache"),
        ("cpu",),
        name=f"e2e-{op}-fused",
    )
    assert agent.run_once() is True
    done = user.get_job(job.id)
    assert done.status == "done", done
    measurements = user.measurements(job_id=job.id)
    assert any(m.outcome == "ok" for m in measurements), [(m.outcome, m.log) for m in measurements]
    best = user.best_config(ConfigQuery(op=op, dtype=dtype, problem=problem, backend="cpu"))
    assert best.exact is True
    assert best.problem["epilogue"] == problem["epilogue"]
    assert best.params["epilogue"] == problem["epilogue"]
    assert best.variant_name.endswith(problem["epilogue"])
    # the unfused problem of the same dims is another key: not tuned
    plain = {k: v for k, v in problem.items() if k != "epilogue"}
    with pytest.raises(ApiError) as err:
        user.best_config(ConfigQuery(op=op, dtype=dtype, problem=plain, backend="cpu"))
    assert err.value.status == 404


def test_tunehub_best_prints_what_was_fused_and_by_whom() -> None:
    def answer(params: dict[str, Any]) -> BestConfigOut:
        return BestConfigOut.model_validate(
            {
                "op": "gemm",
                "dtype": "f16",
                "layout": "rcr",
                "problem": {"m": 8, "n": 4096, "k": 4096, "epilogue": "bias_silu"},
                "tuned_problem": {"m": 8, "n": 4096, "k": 4096, "epilogue": "bias_silu"},
                "exact": True,
                "distance": 0.0,
                "variant_id": "sha-a",
                "variant_name": "gemm_f16_rcr_swapab_m8_t1_w8_u8_s4_bias_silu",
                "params": params,
                "median_us": 30.0,
                "p20_us": 29.0,
                "p80_us": 31.0,
                "throughput": 9.0,
                "throughput_unit": "TFLOP/s",
                "device": {"backend": "cuda", "name": "NVIDIA H200"},
                "toolchain": {},
                "measured_at": "2026-12-05T00:00:00Z",
            }
        )

    fused = {"library": "tunehub", "family": "swapab", "epilogue": "bias_silu"}
    lines = best_answer_lines(answer(fused))
    (line,) = [x for x in lines if x.strip().startswith("fused")]
    assert "bias_silu" in line and "tunehub" in line
    plain = best_answer_lines(answer({"library": "tunehub", "family": "swapab"}))
    assert not any(x.strip().startswith("fused") for x in plain)
