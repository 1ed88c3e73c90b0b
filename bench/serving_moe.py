"""Grouped GEMM on a mixture-of-experts model (issue 26, item 2): tunehub's tuned winner per
token bucket against ``torch._grouped_mm`` and a loop of per-expert matmuls (bf16), and against
``torch._scaled_grouped_mm`` and a loop of per-expert ``torch._scaled_mm`` (FP8 e4m3 with
rowwise scales, bf16 out), side by side in one process, in one GPU run per dtype.

    # here (no GPU): build every variant the run tunes (a command per dtype), then carry
    # .cache/tunehub
    python bench/serving_moe.py --list-precompile | sh
    # on the H200, a device call per dtype (6 problems each; both dtypes' 12 in one call may
    # not fit the 540 s deadline):
    python3 bench/serving_moe.py --dtype bf16 --out $OUT/serving-moe.json [--deadline-s 540]
    python3 bench/serving_moe.py --dtype e4m3 --out $OUT/serving-moe-fp8.json

Models (``--model``), bf16 and e4m3, both expert GEMMs of a layer, each expert's weight stored
[n, k] as torch's Linear stores it:
- ``mixtral-8x7b`` (default): E = 8 experts, hidden 4096, ffn 14336, top-2: ``gate_up`` (w1 and
  w3 stacked: n 28672, k 4096) and ``down`` (w2: n 4096, k 14336);
- ``olmoe-1b-7b`` (allenai/OLMoE-1B-7B-0924): E = 64 experts, hidden 2048, expert ffn 1024,
  top-8: ``gate_up`` (n 2048, k 2048) and ``down`` (n 2048, k 1024).
Buckets (tokens routed = batch x top-k, skew = max / mean tokens of an expert, tuner/moe.py):
decode (batch 8), mid (batch 256), prefill (batch 4096), all at skew 2 (Mixtral: 16, 512 and
8192 tokens). The input of a bucket is its deterministic distribution
``tuner.moe.token_counts``.

Phase 1 tunes each problem with the engine (both families; budget ``--max-variants``). Phase 2
times in this process, interleaved in rounds of rotated order, on the harness's input sets:
- ``tunehub``: the winner's artifact through the harness;
- ``grouped_mm``: ``torch._grouped_mm(A, W.transpose(-2, -1), offs=cumsum(counts))`` (bf16);
- ``loop``: one ``torch.matmul(A_e, W_e.t(), out=D_e)`` per expert with tokens;
and for the e4m3 rows (A, W FP8; scale_a f32 [tokens], scale_b f32 [E, n]: tuner/fp8_grouped.py):
- ``scaled_grouped_mm``: ``torch._scaled_grouped_mm(A, W.transpose(-2, -1), scale_a, scale_b,
  offs=cumsum(counts), out_dtype=torch.bfloat16)`` (its default accumulation);
- ``scaled_loop``: one ``torch._scaled_mm(A_e, W_e.t(), scale_a_e[:, None], scale_b[e][None],
  out_dtype=torch.bfloat16)`` per expert with tokens.
Targets: geomean(grouped_mm / tunehub) >= 1.0 and geomean(loop / tunehub) >= 1.5 (bf16);
geomean(scaled_grouped_mm / tunehub) >= 1.0 (e4m3). JSON to --out.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serving_common import compare_rows, run, tune_rows  # noqa: E402
from bench.vendor_common import (  # noqa: E402
    Timer,
    geomean,
    launch_timer,
)
from tuner.moe import token_counts  # noqa: E402
from tuner.problems import GroupedGemmProblem  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

#: the dtypes of the rows, a column of user calls each
DTYPES = ("bf16", "e4m3")


@dataclass(frozen=True)
class MoeModel:
    """A public MoE model's expert GEMMs: (layer, n, k) each, and its routing's top-k."""

    experts: int
    top_k: int
    layers: tuple[tuple[str, int, int], ...]


#: the models a run can take (--model): Mixtral's 8 large experts, OLMoE's 64 small ones (many
#: short GEMMs, where a per-expert loop pays a launch each)
MODELS = {
    "mixtral-8x7b": MoeModel(8, 2, (("gate_up", 2 * 14336, 4096), ("down", 4096, 14336))),
    "olmoe-1b-7b": MoeModel(64, 8, (("gate_up", 2 * 1024, 2048), ("down", 2048, 1024))),
}
MODEL = "mixtral-8x7b"
#: (bucket, batch, skew): tokens routed = batch x the model's top-k
BUCKETS = [("decode", 8, 2), ("mid", 256, 2), ("prefill", 4096, 2)]
COMPARE_ROUNDS = 5
COMPARE_TIMING = {"warmup_s": 0.05, "bench_s": 0.1, "min_samples": 10, "max_samples": 10_000}


def problems(
    dtype: str | None = None, model: str = MODEL
) -> list[tuple[dict[str, Any], GroupedGemmProblem]]:
    """(label, problem) of every row of ``model``, of ``dtype`` alone when given; the label
    names it."""
    spec = MODELS[model]
    out = []
    for row_dtype in DTYPES if dtype is None else (dtype,):
        for layer, n, k in spec.layers:
            for bucket, batch, skew in BUCKETS:
                problem = GroupedGemmProblem(spec.experts, n, k, batch * spec.top_k, skew)
                label = {"model": model, "dtype": row_dtype, "layer": layer, "bucket": bucket}
                out.append(({**label, **problem.dims()}, problem))
    return out


def precompile_commands(max_variants: int, model: str = MODEL) -> list[str]:
    """The bench/precompile_cuda.py commands (one per dtype) that build what phase 1 tunes."""
    commands = []
    for dtype in DTYPES:
        argv = ["python", "bench/precompile_cuda.py", "--cache-dir", ".cache/tunehub", "--arch"]
        argv += ["sm_90", "--op", "grouped_gemm", "--dtype", dtype]
        for _, problem in problems(dtype, model):
            argv += ["--problem", ",".join(f"{k}={v}" for k, v in problem.dims().items())]
        commands.append(shlex.join([*argv, "--max-variants", str(max_variants)]))
    return commands


def phase_tune(args: argparse.Namespace, config: EngineConfig, deadline: float) -> list[dict]:
    budget = Budget(max_variants=args.max_variants, max_seconds=args.shape_seconds)
    requests = [
        (
            {
                **label,
                "layout": "rcr",
                "problem": problem.dims(),
                "counts": token_counts(problem.experts, problem.tokens, problem.skew),
            },
            TuneRequest("grouped_gemm", label["dtype"], "rcr", problem, "cuda", budget=budget),
        )
        for dtype in args.dtype
        for label, problem in problems(dtype, args.model)
    ]
    return tune_rows(requests, config, deadline)


def _groups(torch: Any, counts: list[int]) -> tuple[int, Any, list[int]]:
    """(the batch's tokens, torch's cumulative int32 ``offs`` on the GPU, each expert's first
    row) of a batch's tokens per expert."""
    offs = torch.tensor(counts, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    return sum(counts), offs, [sum(counts[:e]) for e in range(len(counts))]


def vendor_timers(
    torch: Any,
    harness: Any,
    req: dict[str, Any],
    counts: list[int],
    timing: dict[str, Any] | None = None,
) -> dict[str, Timer]:
    """torch._grouped_mm and the per-expert loop on the harness's input sets (A, W, D), each
    window ``timing`` (default ``COMPARE_TIMING``; bench/regress.py passes its own)."""
    timing = timing or COMPARE_TIMING
    work = harness.workload_for(req)
    rows, offs, starts = _groups(torch, counts)
    sets = [(ins[0], ins[1], out) for ins, out in zip(work.inputs, work.outputs, strict=True)]

    def grouped_mm(i: int, stream: int) -> None:
        a, w, _ = sets[i]
        torch._grouped_mm(a[:rows], w.transpose(-2, -1), offs=offs)

    def loop(i: int, stream: int) -> None:
        a, w, d = sets[i]
        for e, m in enumerate(counts):
            if m:
                s = starts[e]
                torch.matmul(a[s : s + m], w[e].t(), out=d[s : s + m])

    timers = {"loop": launch_timer(harness, loop, len(sets), timing)}
    if hasattr(torch, "_grouped_mm"):
        timers["grouped_mm"] = launch_timer(harness, grouped_mm, len(sets), timing)
    return timers


def fp8_timers(
    torch: Any,
    harness: Any,
    req: dict[str, Any],
    counts: list[int],
    timing: dict[str, Any] | None = None,
) -> dict[str, Timer]:
    """torch._scaled_grouped_mm and a per-expert torch._scaled_mm loop (rowwise scales, bf16
    out) on the harness's e4m3 input sets (A, W, scale_a, scale_b); windows as
    :func:`vendor_timers`'."""
    timing = timing or COMPARE_TIMING
    work = harness.workload_for(req)
    rows, offs, starts = _groups(torch, counts)
    sets = work.inputs
    bf16 = torch.bfloat16

    def scaled_grouped_mm(i: int, stream: int) -> None:
        a, w, sa, sb = sets[i]
        torch._scaled_grouped_mm(
            a[:rows], w.transpose(-2, -1), sa[:rows], sb, offs=offs, out_dtype=bf16
        )

    def scaled_loop(i: int, stream: int) -> None:
        a, w, sa, sb = sets[i]
        for e, m in enumerate(counts):
            if m:
                s = starts[e]
                torch._scaled_mm(
                    a[s : s + m], w[e].t(), sa[s : s + m, None], sb[e][None], out_dtype=bf16
                )

    timers = {"scaled_loop": launch_timer(harness, scaled_loop, len(sets), timing)}
    if hasattr(torch, "_scaled_grouped_mm"):
        timers["scaled_grouped_mm"] = launch_timer(harness, scaled_grouped_mm, len(sets), timing)
    return timers


_USER_TIMERS = {"bf16": vendor_timers, "e4m3": fp8_timers}


def phase_compare(rows: list[dict[str, Any]], deadline: float) -> None:
    for dtype in DTYPES:
        timers = _USER_TIMERS[dtype]
        compare_rows(
            [row for row in rows if row["dtype"] == dtype],
            deadline,
            dtype=dtype,
            timing=COMPARE_TIMING,
            rounds=COMPARE_ROUNDS,
            user_timers=lambda torch, harness, req, row, timers=timers: timers(
                torch, harness, req, row["counts"]
            ),
        )
    for row in rows:
        if "tunehub" in row.get("times_us", {}):
            flops = GroupedGemmProblem(**row["problem"]).flops()
            row["tunehub_tflops"] = flops / row["times_us"]["tunehub"] / 1e6


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def ratios(label: str) -> list[float]:
        return [r["speedup"][label] for r in rows if label in r.get("speedup", {})]

    return {
        "geomean_vs_grouped_mm": geomean(ratios("grouped_mm")),
        "min_vs_grouped_mm": min(ratios("grouped_mm"), default=float("nan")),
        "geomean_vs_loop": geomean(ratios("loop")),
        "rows_measured": len(ratios("loop")),
        "geomean_vs_scaled_grouped_mm": geomean(ratios("scaled_grouped_mm")),
        "min_vs_scaled_grouped_mm": min(ratios("scaled_grouped_mm"), default=float("nan")),
        "geomean_vs_scaled_loop": geomean(ratios("scaled_loop")),
        "fp8_rows_measured": len(ratios("scaled_loop")),
        "rows_total": len(rows),
        "target": "geomean >= 1.0 vs torch._grouped_mm, >= 1.5 vs the per-expert loop (bf16); "
        ">= 1.0 vs torch._scaled_grouped_mm (e4m3)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--compare-reserve-s", type=float, default=150.0)
    parser.add_argument("--shape-seconds", type=float, default=50.0)
    parser.add_argument("--max-variants", type=int, default=8)
    parser.add_argument(
        "--dtype",
        action="append",
        choices=DTYPES,
        help="the rows' dtype, repeatable (default: each of bf16 and e4m3; one per device call "
        "keeps each call's tuning inside its deadline)",
    )
    parser.add_argument("--model", choices=sorted(MODELS), default=MODEL)
    parser.add_argument(
        "--list-precompile", action="store_true", help="print the precompile command and exit"
    )
    args = parser.parse_args()
    if args.list_precompile:
        print("\n".join(precompile_commands(args.max_variants, args.model)))
        return 0
    if args.out is None:
        parser.error("--out is required")
    args.dtype = args.dtype or list(DTYPES)
    return run(args, phase_tune, phase_compare, totals, COMPARE_ROUNDS)


if __name__ == "__main__":
    raise SystemExit(main())
