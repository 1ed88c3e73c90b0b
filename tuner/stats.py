"""Robust statistics of repeated timings."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tuner.problems import Problem
from tuner.types import Timing

__all__ = ["timing_from_samples", "throughput"]


def timing_from_samples(samples_us: Sequence[float]) -> Timing:
    """Median, p20, p80 and min of per-repetition times in microseconds."""
    if not samples_us:
        raise ValueError("no samples")
    data = np.asarray(samples_us, dtype=np.float64)
    p20, median, p80 = np.percentile(data, [20, 50, 80])
    return Timing(
        median_us=float(median),
        p20_us=float(p20),
        p80_us=float(p80),
        min_us=float(data.min()),
        reps=int(data.size),
    )


def throughput(problem: Problem, element_size: int, median_us: float) -> tuple[float | None, str]:
    """TFLOP/s for ops that compute (gemm, conv2d), GB/s read + written for the others."""
    if median_us <= 0:
        return None, ""
    if problem.flops() > 0:
        return problem.flops() / median_us / 1e6, "TFLOP/s"
    return problem.bytes_moved(element_size) / median_us / 1e3, "GB/s"
