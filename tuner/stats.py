"""Robust statistics of repeated timings, and the rule that decides when timing may stop.

Adaptive timing (the CPU runner applies it in C++, ``kernel_templates/cpu/_runner.cpp``):
repeat until the 95% confidence interval of the median, taken from order statistics (ranks
n/2 -+ 1.96 sqrt(n)/2, no assumption on the distribution), is within ``target`` of the
median, after a floor of repetitions and before a cap of time or repetitions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tuner.problems import Problem
from tuner.types import Timing

__all__ = [
    "timing_from_samples",
    "throughput",
    "median_ci",
    "median_ci_rel",
    "ci_reached",
    "cpu_share",
]

#: two-sided 95%
_Z = 1.96


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


def median_ci(samples_us: Sequence[float]) -> tuple[float, float]:
    """The 95% confidence interval (low, high) of the median, from order statistics."""
    data = sorted(samples_us)
    n = len(data)
    if n == 0:
        raise ValueError("no samples")
    half = _Z * math.sqrt(n) / 2.0
    lo = max(0, math.floor(n / 2.0 - half))
    hi = min(n - 1, math.ceil(n / 2.0 + half))
    return data[lo], data[hi]


def median_ci_rel(samples_us: Sequence[float]) -> float:
    """Half the width of the median's confidence interval over the median."""
    low, high = median_ci(samples_us)
    median = float(np.median(np.asarray(samples_us, dtype=np.float64)))
    return (high - low) / (2.0 * median) if median > 0 else 0.0


def ci_reached(samples_us: Sequence[float], target: float, min_reps: int) -> bool:
    """True when timing may stop: the floor is met and the CI is within ``target``."""
    return len(samples_us) >= max(1, min_reps) and median_ci_rel(samples_us) <= target


def cpu_share(cpu_seconds: object, wall_seconds: object) -> float | None:
    """Process CPU time over wall time of a single-threaded timed loop (None if unknown)."""
    if not isinstance(cpu_seconds, int | float) or not isinstance(wall_seconds, int | float):
        return None
    if wall_seconds <= 0:
        return None
    return float(cpu_seconds) / float(wall_seconds)
