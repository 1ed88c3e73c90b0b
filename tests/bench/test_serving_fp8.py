"""bench/serving_fp8.py without a GPU: its shapes are valid problems of both scalings, its
budgets reach cuBLASLt's default and our head of the space's order, its precompile commands
parse as bench/precompile_cuda.py reads them, and its summary's figures."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bench.precompile_cuda import parse_dims
from bench.serving_fp8 import (
    LAYERS,
    MS,
    SCALED_MM,
    SCALED_MM_ROTATED,
    TUNEHUB_FIXED,
    budget_variants,
    list_commands,
    problems,
    same_buffer_ratios,
    summarize,
    winner_source,
    write_page,
)
from tuner.problems import ScaledGemmProblem, problem_from_dict
from tuner.spaces.cuda_scaled_gemm import head_size


def test_every_shape_is_a_valid_problem_of_both_scalings() -> None:
    shapes = problems(["per_tensor", "block"])
    assert len(shapes) == 2 * len(LAYERS) * len(MS)
    assert {p.m for _, p in shapes} == {1, 8, 32, 2048}
    assert all(p.n % 128 == 0 and p.k % 128 == 0 for _, p in shapes)


def test_budget_is_the_default_our_head_and_the_extra_vendor_algorithms() -> None:
    # decode shapes have swap-AB and decode heads on top of CUTLASS's; prefill only CUTLASS's
    assert head_size(1) > head_size(32) > head_size(2048) > 0
    assert budget_variants(1, 4) == 1 + head_size(1) + 4
    assert budget_variants(2048, 0) == 1 + head_size(2048)


def test_precompile_commands_parse() -> None:
    lines = list_commands(["block"], 2)
    assert len(lines) == len(MS)  # one per token count: the budget depends on m
    for line, m in zip(lines, MS, strict=True):
        argv = shlex.split(line)
        assert argv[argv.index("--op") + 1] == "scaled_gemm"
        assert argv[argv.index("--dtype") + 1] == "e4m3"
        assert int(argv[argv.index("--max-variants") + 1]) == budget_variants(m, 2)
        texts = [argv[i + 1] for i, a in enumerate(argv) if a == "--problem"]
        assert len(texts) == len(LAYERS)
        for text in texts:
            problem = problem_from_dict("scaled_gemm", parse_dims(text))
            assert isinstance(problem, ScaledGemmProblem)
            assert problem.scaling == "block" and problem.m == m


def test_same_buffer_ratios_pair_like_with_like() -> None:
    times = {"tunehub": 8.0, TUNEHUB_FIXED: 7.5, SCALED_MM: 7.8, SCALED_MM_ROTATED: 8.4}
    assert same_buffer_ratios(times) == {
        "fixed": pytest.approx(7.8 / 7.5),
        "rotated": pytest.approx(8.4 / 8.0),
    }
    # torch refused out=: only the pair on torch's buffers
    assert same_buffer_ratios({"tunehub": 8.0, TUNEHUB_FIXED: 7.5, SCALED_MM: 7.8}) == {
        "fixed": pytest.approx(7.8 / 7.5)
    }


def test_summary_figures() -> None:
    rows = [
        {"scaling": "block", "m": 1, "speedup": {SCALED_MM: 1.2}, "of_stream_limit": 0.9,
         "of_same_size_copy": 1.01, "same_buffers": {"fixed": 1.1, "rotated": 1.3}},
        {"scaling": "block", "m": 16, "speedup": {SCALED_MM: 1.0}, "of_stream_limit": 0.95,
         "of_same_size_copy": 0.97, "same_buffers": {"fixed": 1.0, "rotated": 1.0}},
        {"scaling": "block", "m": 2048, "speedup": {SCALED_MM: 0.96}, "of_stream_limit": 0.1,
         "same_buffers": {"fixed": 0.99}},
        {"scaling": "block", "m": 8, "torch_error": "RuntimeError: refused"},  # left out
    ]  # fmt: skip
    block = summarize(rows)["block"]
    # judged on the same buffers, torch's (fixed)
    assert block["geomean_speedup"] == pytest.approx((1.1 * 1.0 * 0.99) ** (1 / 3))
    assert block["min_speedup"] == 0.99 and block["rows_compared"] == 3
    assert block["geomean_speedup_rotated"] == pytest.approx((1.3 * 1.0) ** (1 / 2))
    assert block["min_speedup_rotated"] == 1.0
    assert block["geomean_speedup_mixed"] == pytest.approx((1.2 * 1.0 * 0.96) ** (1 / 3))
    assert block["min_speedup_mixed"] == 0.96
    assert block["decode_min_of_stream_limit"] == 0.9  # m = 2048 is not decode
    assert block["decode_min_of_same_size_copy"] == 0.97


def test_enumerated_winners_are_counted_and_marked(tmp_path: Path) -> None:
    lt_name = "scaled_gemm_e4m3_bf16_per_tensor_lt_a66_t13_s36_k2_r2_w0_c1_i0_cl4"
    rows = [
        {"scaling": "per_tensor", "layer": "down_proj", "m": 8, "n": 3584, "k": 18944,
         "winner": lt_name,
         "candidates": [{"name": "default", "source": "heuristic"},
                        {"name": lt_name, "source": "enumerated"},
                        {"name": "swapab"}]},
        {"scaling": "per_tensor", "layer": "o_proj", "m": 8, "n": 3584, "k": 3584,
         "winner": "swapab", "candidates": [{"name": "swapab"}]},
    ]  # fmt: skip
    assert [winner_source(r) for r in rows] == ["enumerated", None]
    totals = summarize(rows)["per_tensor"]
    assert totals["enumerated_tried"] == 1 and totals["enumerated_winners"] == 1
    write_page(tmp_path / "fp8.md", {"meta": {"command": "c"}, "rows": rows, "totals": {}})
    table = [line for line in (tmp_path / "fp8.md").read_text().splitlines() if "_proj" in line]
    assert f"| {lt_name} (enumerated) |" in table[0] and "(enumerated)" not in table[1]


def test_page_has_a_line_per_row(tmp_path: Path) -> None:
    rows = [
        {"scaling": "per_tensor", "layer": "o_proj", "m": 1, "n": 3584, "k": 3584,
         "winner": "scaled_gemm_e4m3_bf16_per_tensor_swapab_m1_w1_wp8_u4",
         "times_us": {"tunehub": 7.5, TUNEHUB_FIXED: 7.25, SCALED_MM: 7.8,
                      SCALED_MM_ROTATED: 8.0},
         "speedup": {SCALED_MM: 1.04}, "same_buffers": {"fixed": 1.076, "rotated": 1.067},
         "of_stream_limit": 0.58, "of_same_size_copy": 0.93},
        {"scaling": "block", "layer": "o_proj", "m": 1, "n": 3584, "k": 3584,
         "tune_error": "deadline"},
    ]  # fmt: skip
    payload = {"meta": {"command": "python3 bench/serving_fp8.py"}, "rows": rows,
               "totals": summarize(rows)}  # fmt: skip
    write_page(tmp_path / "fp8.md", payload)
    lines = (tmp_path / "fp8.md").read_text().splitlines()
    assert all(len(line) <= 100 for line in lines[:10])
    assert "| per_tensor | o_proj | 1 | 3584 | 3584 | scaled_gemm_e4m3" in lines[12]
    assert lines[12].endswith("| 7.50 | 7.25 | 7.80 | 8.00 | 1.076 | 1.067 | 1.040 | 0.58 | 0.93 |")
    assert lines[13] == "| block | o_proj | 1 | 3584 | 3584 | deadline |" + " - |" * 9
