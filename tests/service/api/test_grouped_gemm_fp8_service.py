"""grouped_gemm with dtype e4m3 (FP8, rowwise scales) through the service (issue 26 item 2): a
job is taken with the bf16 problem's dims and key, while n or k off whole 16-byte FP8 rows is a
422 naming the dim over REST (jobs, best, the batch query's per-query error) and exit 2 naming
it in the CLI (``tune`` and ``tune --from-file``); the same dims stay fine for bf16."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.settings import get_settings

DOWN = "http://127.0.0.1:1"
FP8 = {"op": "grouped_gemm", "dtype": "e4m3"}
CUDA = {"backend": "cuda", "name": "H200", "arch": "sm_90"}
#: multiples of 8 (fine for bf16), not of 16
BAD = [
    ({"experts": 8, "n": 24, "k": 64, "tokens": 8}, "n"),
    ({"experts": 8, "n": 64, "k": 40, "tokens": 8}, "k"),
]


@pytest.mark.parametrize(("problem", "field"), BAD)
def test_fp8_rows_off_16_bytes_are_a_422_naming_the_dim(
    api: Any, problem: dict[str, Any], field: str
) -> None:
    body = api.job_body(**FP8, problems=[problem], device=CUDA)
    response = api.client.post("/v1/jobs", json=body, headers=api.harness.submit)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert ["body", "problems", 0, field] in [e["loc"] for e in errors], errors
    assert any("multiple of 16" in e["msg"] for e in errors), errors
    answer = api.best(**FP8, **problem)
    assert answer.status_code == 422, answer.text
    assert ["query", field] in [e["loc"] for e in answer.json()["detail"]]
    assert api.best(op="grouped_gemm", dtype="bf16", **problem).status_code == 404  # bf16: fine
    batch = api.client.post("/v1/configs/query", json={"queries": [{**FP8, "problem": problem}]})
    assert batch.status_code == 200, batch.text
    (result,) = batch.json()["results"]
    assert result["result"] is None and f"problem.{field}" in result["error"], result


def test_an_fp8_job_is_taken_with_the_bf16_dims(api: Any) -> None:
    problem = {"experts": 8, "n": 14336, "k": 4096, "tokens": 100, "skew": 2}
    body = api.submit(**FP8, problems=[problem], device=CUDA)
    (status,) = body["problems"]
    assert status["problem"] == {**problem, "tokens": 128}


def test_the_cli_refuses_fp8_rows_off_16_bytes_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    get_settings.cache_clear()
    dims = ("--experts", "8", "--n", "24", "--k", "64", "--tokens", "8")
    with pytest.raises(SystemExit) as exited:
        main(
            [
                "tune",
                "grouped_gemm",
                *dims,
                "--dtype",
                "e4m3",
                "--backend",
                "cuda",
                "--server",
                DOWN,
            ]
        )
    _, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert "n: must be a multiple of 16" in err and "Traceback" not in err
    line = {**FP8, "problem": {"experts": 8, "n": 64, "k": 40, "tokens": 8}}
    path = tmp_path / "shapes.jsonl"
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(SystemExit) as exited:
        main(["tune", "--from-file", str(path), "--server", DOWN])
    _, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert "shapes.jsonl:1: problem: k: must be a multiple of 16" in err, err
