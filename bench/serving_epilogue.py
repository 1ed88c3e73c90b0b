"""Fused epilogues on serving shapes (issue 26, item 3): tunehub's tuned fused kernel against the
unfused pair a user writes, side by side in one process, in one GPU run.

    python3 bench/serving_epilogue.py --out $OUT/serving-epilogue.json [--deadline-s 540]
    python3 bench/serving_epilogue.py --list | sh   # precompile here (no GPU), carry the cache

Shapes (f16; gemm rcr, D = X W^T with W stored [n,k]; conv2d NHWC):
- Qwen2.5-7B attention qkv_proj (N 4608 = 3584 + 2 x 512, K 3584), which has a bias: ``bias``;
- Mistral-7B MLP: gate_up_proj (N 28672 = 2 x 14336, K 4096) as ``gated_silu`` (decode only:
  the gate and up halves meet in the decode kernels' registers; no prefill family fuses it),
  and its gate projection alone (N 14336) with ``bias_silu`` and ``bias_gelu``;
- token counts: decode M = 1, 8, 16 and prefill M = 512, 2048;
- ResNet-50 conv layers at batch 32 with BN folded into a bias: conv + ``bias_relu``.

Phase 1 tunes each fused problem with the engine (its families for that epilogue; budget
``--max-variants``). Phase 2 times in this process, interleaved in rounds of rotated order on
the same input sets (``bench.vendor_common.interleaved_medians``):
- ``tunehub``: the winner's artifact through the harness;
- ``unfused``: the pair the issue names: torch.matmul (cuBLAS) or torch's conv2d (cuDNN) with no
  bias, then torch's bias add and activation (gated: + bias, chunk, silu(gate) * up);
- ``linear_then_act`` (gemm) / ``conv_bias_then_act`` (conv): what a careful user writes,
  F.linear(x, W, b) (cuBLASLt's bias epilogue) or F.conv2d(x, w, b), then the activation.
The speedup the target reads is unfused / tunehub (>= 1.15x geomean, none below 1.0x); the
careful-user column is reported beside it. JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serving_common import compare_rows, run, tune_rows  # noqa: E402
from bench.vendor_common import (  # noqa: E402
    Timer,
    geomean,
    launch_timer,
)
from tuner.problems import Conv2dProblem, GemmProblem, Problem  # noqa: E402
from tuner.types import Budget, EngineConfig, TuneRequest  # noqa: E402

DTYPE = "f16"
DECODE_MS = (1, 8, 16)
PREFILL_MS = (512, 2048)
#: (model, layer, n, k, epilogue, token counts)
GEMM_LAYERS = [
    ("qwen2.5-7b", "qkv_proj", 4608, 3584, "bias", DECODE_MS + PREFILL_MS),
    ("mistral-7b", "gate_up_proj", 28672, 4096, "gated_silu", DECODE_MS),
    ("mistral-7b", "gate_proj", 14336, 4096, "bias_silu", DECODE_MS + PREFILL_MS),
    ("mistral-7b", "gate_proj", 14336, 4096, "bias_gelu", (16, 2048)),
]
#: ResNet-50 (batch 32): (stage, h=w, c, k, r=s, stride, pad)
CONV_LAYERS = [
    ("conv2_3x3", 56, 64, 64, 3, 1, 1),
    ("conv3_3x3", 28, 128, 128, 3, 1, 1),
    ("conv4_3x3", 14, 256, 256, 3, 1, 1),
    ("conv5_3x3", 7, 512, 512, 3, 1, 1),
    ("conv2_1x1_expand", 56, 64, 256, 1, 1, 0),
    ("conv4_1x1_reduce", 14, 1024, 256, 1, 1, 0),
]
BATCH = 32
COMPARE_ROUNDS = 5
COMPARE_TIMING = {"warmup_s": 0.05, "bench_s": 0.08, "min_samples": 10, "max_samples": 10_000}


def problems() -> list[tuple[dict[str, Any], Problem, str]]:
    """(row labels, problem, layout) of every benchmarked shape."""
    out: list[tuple[dict[str, Any], Problem, str]] = []
    for model, layer, n, k, epilogue, ms in GEMM_LAYERS:
        for m in ms:
            label = {"model": model, "layer": layer, "m": m, "n": n, "k": k, "epilogue": epilogue}
            out.append((label, GemmProblem(m, n, k, epilogue=epilogue), "rcr"))
    for layer, hw, c, k, rs, stride, pad in CONV_LAYERS:
        problem = Conv2dProblem(BATCH, hw, hw, c, k, rs, rs, stride, pad, 1, epilogue="bias_relu")
        label = {"model": "resnet-50", "layer": layer, **problem.dims()}
        out.append((label, problem, "nhwc"))
    return out


def list_commands(per_shape: int) -> None:
    """The precompile commands (bench/precompile_cuda.py) of every problem, one per op."""
    by_op: dict[tuple[str, str], list[str]] = {}
    for _, problem, layout in problems():
        op = "gemm" if isinstance(problem, GemmProblem) else "conv2d"
        dims = ",".join(f"{key}={value}" for key, value in problem.dims().items())
        by_op.setdefault((op, layout), []).append(f"--problem {dims}")
    for (op, layout), dims_args in by_op.items():
        print(
            "python bench/precompile_cuda.py --cache-dir .cache/tunehub --arch sm_90 "
            f"--op {op} --dtype {DTYPE} --layout {layout} --max-variants {per_shape} "
            + " ".join(dims_args)
        )


def phase_tune(args: argparse.Namespace, config: EngineConfig, deadline: float) -> list[dict]:
    budget = Budget(max_variants=args.max_variants, max_seconds=args.shape_seconds)
    requests = [
        (
            {**label, "layout": layout, "problem": problem.dims()},
            TuneRequest(
                "gemm" if isinstance(problem, GemmProblem) else "conv2d",
                DTYPE,
                layout,
                problem,
                "cuda",
                budget=budget,
            ),
        )
        for label, problem, layout in problems()
    ]
    return tune_rows(requests, config, deadline)


def _activation(torch: Any, epilogue: str) -> Any:
    functional = torch.nn.functional
    return {
        "bias": lambda y: y,
        "bias_relu": torch.relu,
        "bias_gelu": functional.gelu,
        "bias_silu": functional.silu,
    }[epilogue]


def gemm_timers(
    torch: Any,
    harness: Any,
    req: dict[str, Any],
    epilogue: str,
    timing: dict[str, Any] | None = None,
) -> dict[str, Timer]:
    """The unfused pair and F.linear + activation on the harness's input sets (W stored [n,k]),
    each window ``timing`` (default ``COMPARE_TIMING``; bench/regress.py passes its own)."""
    timing = timing or COMPARE_TIMING
    work = harness.workload_for(req)
    sets = [(ins[0], ins[1], ins[2]) for ins in work.inputs]
    functional = torch.nn.functional

    def finish(y: Any) -> Any:
        if epilogue == "gated_silu":
            gate, up = y.chunk(2, dim=-1)
            return functional.silu(gate) * up
        return _activation(torch, epilogue)(y)

    def unfused(i: int, stream: int) -> None:
        x, w, b = sets[i]
        finish(torch.matmul(x, w.t()) + b)

    def linear_then_act(i: int, stream: int) -> None:
        x, w, b = sets[i]
        finish(functional.linear(x, w, b))

    n = len(sets)
    return {
        "unfused": launch_timer(harness, unfused, n, timing),
        "linear_then_act": launch_timer(harness, linear_then_act, n, timing),
    }


def conv_timers(
    torch: Any,
    harness: Any,
    req: dict[str, Any],
    problem: dict,
    timing: dict[str, Any] | None = None,
) -> dict[str, Timer]:
    """torch's conv2d (cuDNN, channels-last views of the NHWC sets), then bias + relu; each
    window ``timing`` (default ``COMPARE_TIMING``)."""
    timing = timing or COMPARE_TIMING
    work = harness.workload_for(req)
    sets = [(ins[0].permute(0, 3, 1, 2), ins[1].permute(0, 3, 1, 2), ins[2]) for ins in work.inputs]
    conv = torch.nn.functional.conv2d
    geometry = {"stride": problem["stride"], "padding": problem["pad"]}

    def unfused(i: int, stream: int) -> None:
        x, w, b = sets[i]
        torch.relu(conv(x, w, None, **geometry) + b.view(1, -1, 1, 1))

    def conv_bias_then_act(i: int, stream: int) -> None:
        x, w, b = sets[i]
        torch.relu(conv(x, w, b, **geometry))

    n = len(sets)
    return {
        "unfused": launch_timer(harness, unfused, n, timing),
        "conv_bias_then_act": launch_timer(harness, conv_bias_then_act, n, timing),
    }


def user_timers(torch: Any, harness: Any, req: dict[str, Any], row: dict) -> dict[str, Timer]:
    if row["op"] == "gemm":
        return gemm_timers(torch, harness, req, row["epilogue"])
    return conv_timers(torch, harness, req, row["problem"])


def phase_compare(rows: list[dict[str, Any]], deadline: float) -> None:
    import torch

    torch.backends.cudnn.benchmark = True  # the user's best cuDNN algorithm, not its default
    compare_rows(
        rows,
        deadline,
        dtype=DTYPE,
        timing=COMPARE_TIMING,
        rounds=COMPARE_ROUNDS,
        user_timers=user_timers,
    )


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    over_unfused = [r["speedup"]["unfused"] for r in rows if "unfused" in r.get("speedup", {})]
    careful = [
        r["speedup"].get("linear_then_act", r["speedup"].get("conv_bias_then_act"))
        for r in rows
        if r.get("speedup")
    ]
    return {
        "geomean_vs_unfused": geomean(over_unfused),
        "min_vs_unfused": min(over_unfused, default=float("nan")),
        "geomean_vs_careful_user": geomean([c for c in careful if c]),
        "rows_measured": len(over_unfused),
        "rows_total": len(rows),
        "target": "geomean >= 1.15, none below 1.0 (vs unfused)",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="the JSON file to write")
    parser.add_argument("--list", action="store_true", help="print the precompile commands")
    parser.add_argument("--cache-dir", default=".cache/tunehub")
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--compare-reserve-s", type=float, default=120.0)
    parser.add_argument("--shape-seconds", type=float, default=25.0)
    parser.add_argument("--max-variants", type=int, default=8)
    args = parser.parse_args()
    if args.list:
        list_commands(args.max_variants)
        return 0
    if args.out is None:
        parser.error("--out is required (or --list)")
    return run(args, phase_tune, phase_compare, totals, COMPARE_ROUNDS)


if __name__ == "__main__":
    raise SystemExit(main())
