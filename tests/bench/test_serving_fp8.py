"""bench/serving_fp8.py without a GPU: its shapes are valid problems of both scalings, its
precompile commands parse as bench/precompile_cuda.py reads them, and its summary's figures."""

from __future__ import annotations

import math

import pytest

from bench.precompile_cuda import parse_dims
from bench.serving_fp8 import LAYERS, MS, list_commands, problems, summarize
from tuner.problems import problem_from_dict


def test_every_shape_is_a_valid_problem_of_both_scalings() -> None:
    shapes = problems(["per_tensor", "block"])
    assert len(shapes) == 2 * len(LAYERS) * len(MS)
    assert {p.m for _, p in shapes} == {1, 8, 32, 2048}
    assert all(p.n % 128 == 0 and p.k % 128 == 0 for _, p in shapes)


def test_precompile_commands_parse(capsys: pytest.CaptureFixture[str]) -> None:
    list_commands(["block"], 8)
    (line,) = capsys.readouterr().out.splitlines()
    assert "--op scaled_gemm --dtype e4m3 --max-variants 8" in line
    texts = line.split("--problem ")[1:]
    assert len(texts) == len(LAYERS) * len(MS)
    problem = problem_from_dict("scaled_gemm", parse_dims(texts[0].strip()))
    assert problem.scaling == "block" and (problem.m, problem.n, problem.k) == (1, 4608, 3584)


def test_summary_figures() -> None:
    rows = [
        {"scaling": "block", "m": 1, "speedup": 1.2, "of_stream_limit": 0.9},
        {"scaling": "block", "m": 2048, "speedup": 0.96, "of_stream_limit": 0.1},
        {"scaling": "block", "m": 8},  # nothing measured: left out
    ]
    block = summarize(rows)["block"]
    assert block["geomean_speedup"] == pytest.approx(math.sqrt(1.2 * 0.96))
    assert block["min_speedup"] == 0.96 and block["rows_compared"] == 2
    assert block["decode_min_of_stream_limit"] == 0.9  # m = 2048 is not decode
