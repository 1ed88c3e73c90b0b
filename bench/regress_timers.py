"""The labels bench/regress.py times for one of its rows (no GPU, no torch at import): the
tuned winner's artifact (``tunehub``) and its reference. Rows (reduce, softmax): the device
copy, with torch's op shown beside; GEMM: torch.matmul (``cublas``); conv2d: cuDNN's default
engine config (``cudnn_default``, an artifact of the tuning job); issue 26's families: the
call a user makes instead, timed by the serving benchmarks' own timers (``user_timers``).
Every label is timed in the same windows (``TIMING``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from bench.regress_shapes import DTYPE
from bench.vendor_common import Timer, artifact_timer, launch_timer

__all__ = ["TIMING", "UserTimers", "row_dtype", "row_timers", "timers_for", "user_timers"]

#: each label's window in a round
TIMING = {"warmup_s": 0.02, "bench_s": 0.04, "min_samples": 10, "max_samples": 10_000}
#: ``(torch, harness, req)`` -> labelled timers of a user's calls (a serving benchmark's)
UserTimers = Callable[[Any, Any, dict[str, Any]], dict[str, Timer]]


def row_dtype(row: dict[str, Any]) -> str:
    """The row's dtype (a regress.json written before rows named it: ``DTYPE``)."""
    return str(row.get("dtype") or DTYPE)


def row_timers(
    torch: Any, harness: Any, row: dict[str, Any], req: dict[str, Any], copy: Timer
) -> dict[str, Timer]:
    """A row shape's labels: the winner, the device copy and torch's op (shown beside)."""
    timers = {"tunehub": artifact_timer(harness, req, row["artifact"]), "copy": copy}
    try:  # torch's op, shown beside (it comes with Triton's baselines, which need triton)
        from bench import vendor_baselines as vb
    except ImportError as exc:
        row.setdefault("compare_errors", {})["torch"] = f"{type(exc).__name__}: {exc}"[:300]
        return timers
    work = harness.workload_for(req)
    make = vb.softmax_baselines if row["op"] == "softmax" else vb.reduce_baselines
    calls = [make(ins[0], out)["torch"] for ins, out in zip(work.inputs, work.outputs, strict=True)]

    def torch_op(i: int, stream: int) -> None:
        calls[i]()

    timers["torch"] = launch_timer(harness, torch_op, len(calls), TIMING)
    return timers


def user_timers(row: dict[str, Any]) -> UserTimers | None:
    """The serving benchmark's timers of the call a user makes instead of ``row``'s kernel
    (their labels include the row's reference), in this script's windows (``TIMING``): a
    fused GEMM or conv2d the unfused pair (bench/serving_epilogue.py), scaled_gemm
    torch._scaled_mm (bench/serving_fp8.py), grouped_gemm torch._grouped_mm (bf16) or
    torch._scaled_grouped_mm (e4m3) on the bucket's token counts (bench/serving_moe.py).
    None for the ops whose reference this script times itself (copy, cublas, cudnn_default)."""
    op, problem = row["op"], row["problem"]
    if op in ("gemm", "conv2d") and "epilogue" in problem:  # an unfused problem names none
        from bench import serving_epilogue

        if op == "gemm":
            return partial(
                serving_epilogue.gemm_timers, epilogue=problem["epilogue"], timing=TIMING
            )
        return partial(serving_epilogue.conv_timers, problem=problem, timing=TIMING)
    if op == "scaled_gemm":
        from bench import serving_fp8
        from tuner.problems import ScaledGemmProblem

        scaled = ScaledGemmProblem(**problem)
        return partial(serving_fp8.scaled_mm_timers, problem=scaled, timing=TIMING)
    if op == "grouped_gemm":
        from bench import serving_moe
        from tuner.moe import token_counts

        counts = token_counts(problem["experts"], problem["tokens"], problem.get("skew", 1))
        make = serving_moe.fp8_timers if row_dtype(row) == "e4m3" else serving_moe.vendor_timers
        return partial(make, counts=counts, timing=TIMING)
    return None


def timers_for(
    torch: Any, harness: Any, row: dict[str, Any], req: dict[str, Any], copy: Timer
) -> dict[str, Timer]:
    """The labels timed for one row of bench/regress.py: ``tunehub`` (the winner's artifact),
    its reference and (rows) torch; ``copy`` is the device copy's timer (the rows' reference).
    A reference this torch lacks is a RuntimeError (the caller records it for the row)."""
    if row["op"] in ("softmax", "reduce"):
        return row_timers(torch, harness, row, req, copy)
    timers = {"tunehub": artifact_timer(harness, req, row["artifact"])}
    make = user_timers(row)
    if make is not None:  # the reference alone: the other calls of the benchmark cost time
        theirs = make(torch, harness, req)
        if row["reference"] not in theirs:  # e.g. a torch without torch._grouped_mm
            raise RuntimeError(f"{row['reference']}: not in this torch {torch.__version__}")
        timers[row["reference"]] = theirs[row["reference"]]
    elif row["op"] == "gemm":
        from bench.vs_vendor_gemm import matmul_timer

        timers["cublas"] = matmul_timer(torch, harness, req, TIMING)
    elif row.get("vendor_default_artifact"):
        timers["cudnn_default"] = artifact_timer(harness, req, row["vendor_default_artifact"])
    return timers
