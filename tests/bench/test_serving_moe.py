"""bench/serving_moe.py without a GPU: the model's shapes and buckets, the precompile command
it prints, and its totals."""

from __future__ import annotations

import shlex

import pytest

from bench import serving_moe as sm
from bench.precompile_cuda import parse_dims
from tuner.moe import bucket_of, token_counts
from tuner.problems import problem_from_dict


def test_mixtral_expert_gemms_at_three_buckets_in_bf16_and_e4m3() -> None:
    rows = sm.problems()
    assert len(rows) == 12
    assert [r["dtype"] for r, _ in rows] == ["bf16"] * 6 + ["e4m3"] * 6
    assert [p for _, p in sm.problems("bf16")] == [p for _, p in sm.problems("e4m3")]
    assert {(r["layer"], r["n"], r["k"]) for r, _ in rows} == {
        ("gate_up", 28672, 4096),
        ("down", 4096, 14336),
    }
    assert [r["bucket"] for r, _ in rows[:3]] == ["decode", "mid", "prefill"]
    for _, problem in rows:
        counts = token_counts(problem.experts, problem.tokens, problem.skew)
        assert bucket_of(counts) == (problem.tokens, problem.skew)


def test_olmoe_has_64_experts_at_top_8_so_its_buckets_route_8_tokens_a_request() -> None:
    rows = sm.problems("e4m3", "olmoe-1b-7b")
    assert [p.tokens for _, p in rows[:3]] == [64, 2048, 32768]
    assert {(r["model"], r["layer"], p.experts, p.n, p.k) for r, p in rows} == {
        ("olmoe-1b-7b", "gate_up", 64, 2048, 2048),
        ("olmoe-1b-7b", "down", 64, 2048, 1024),
    }
    for _, problem in rows:  # e4m3 takes them: n and k multiples of 16
        problem_from_dict("grouped_gemm", problem.dims(), "e4m3")


def test_the_precompile_commands_build_every_problem_of_each_dtype() -> None:
    commands = sm.precompile_commands(8)
    assert len(commands) == 2
    for command, dtype in zip(commands, ("bf16", "e4m3"), strict=True):
        argv = shlex.split(command)
        assert argv[argv.index("--op") + 1] == "grouped_gemm"
        assert argv[argv.index("--dtype") + 1] == dtype
        problems = [argv[i + 1] for i, a in enumerate(argv) if a == "--problem"]
        built = [problem_from_dict("grouped_gemm", parse_dims(p), dtype) for p in problems]
        assert built == [p for _, p in sm.problems(dtype)]
    olmoe = shlex.split(sm.precompile_commands(8, "olmoe-1b-7b")[0])
    assert "experts=64,n=2048,k=1024,tokens=64,skew=2" in olmoe


def test_totals_read_the_speedups() -> None:
    rows = [
        {"speedup": {"grouped_mm": 1.2, "loop": 2.0}},
        {"speedup": {"grouped_mm": 0.8, "loop": 3.0}},
        {"tune_error": "deadline"},
    ]
    totals = sm.totals(rows)
    assert totals["geomean_vs_grouped_mm"] == pytest.approx((1.2 * 0.8) ** 0.5)
    assert totals["min_vs_grouped_mm"] == 0.8
    assert totals["geomean_vs_loop"] == pytest.approx(6**0.5)
    assert totals["rows_measured"] == 2 and totals["rows_total"] == 3
    assert totals["fp8_rows_measured"] == 0


def test_totals_read_the_fp8_speedups_apart() -> None:
    rows = [
        {"speedup": {"grouped_mm": 1.2, "loop": 2.0}},
        {"speedup": {"scaled_grouped_mm": 1.1, "scaled_loop": 1.8}},
        {"speedup": {"scaled_grouped_mm": 0.9, "scaled_loop": 2.2}},
    ]
    totals = sm.totals(rows)
    assert totals["geomean_vs_grouped_mm"] == pytest.approx(1.2)
    assert totals["geomean_vs_scaled_grouped_mm"] == pytest.approx((1.1 * 0.9) ** 0.5)
    assert totals["min_vs_scaled_grouped_mm"] == 0.9
    assert totals["geomean_vs_scaled_loop"] == pytest.approx((1.8 * 2.2) ** 0.5)
    assert totals["rows_measured"] == 1 and totals["fp8_rows_measured"] == 2
