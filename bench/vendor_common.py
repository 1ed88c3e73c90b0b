"""Pieces shared by the vendor comparisons of one op (bench/vs_vendor_gemm.py,
bench/vs_vendor_conv.py) and bench/regress.py: a tuning result's summary, the geomean, and
timing a row's artifacts (the tuned winner, the vendor's default) in the harness."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

__all__ = [
    "Timer",
    "artifact_timer",
    "geomean",
    "interleaved_medians",
    "interleaved_rounds",
    "launch_timer",
    "summary",
    "time_artifacts",
]


def summary(result: Any) -> dict[str, Any]:
    """One candidate of a tuning result, as the JSON lists it."""
    return {
        "name": result.variant_name,
        "library": result.params.get("library"),
        "outcome": result.outcome.value,
        "median_us": result.timing.median_us if result.timing else None,
        "compile_s": round(result.compile_seconds, 2),
        "log": result.log[-200:] if not result.ok else "",
    }


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else float("nan")


#: one timing window of a label: the samples (microseconds) of one harness run
Timer = Callable[[], list[float]]


def interleaved_medians(
    timers: dict[str, Timer], row: dict[str, Any], rounds: int = 1
) -> dict[str, float]:
    """Median microseconds per label over ``rounds`` rounds; each round times every label once,
    the order rotated by one label a round, and a label's figure is the median of its round
    medians. One window per label in a fixed order is biased: on a power-capped GPU the same
    kernel measured 92 and 96 us as two labels of one row (H200, 2026-12-04 07:13 run).
    A failing label goes into ``row["compare_errors"]`` and leaves the later rounds."""
    medians = interleaved_rounds(timers, row, rounds)
    return {label: statistics.median(values) for label, values in medians.items() if values}


def interleaved_rounds(
    timers: dict[str, Timer], row: dict[str, Any], rounds: int = 1
) -> dict[str, list[float]]:
    """The rounds of ``interleaved_medians``: each label's median microseconds per round, in
    round order (shorter where a label failed; its error is in ``row["compare_errors"]``)."""
    medians: dict[str, list[float]] = {label: [] for label in timers}
    active = list(timers)
    for round_no in range(rounds):
        if not active:
            break
        shift = round_no % len(active)
        for label in active[shift:] + active[:shift]:
            try:
                samples = timers[label]()
            except Exception as exc:  # reported in the JSON; the other labels and rows go on
                row.setdefault("compare_errors", {})[label] = f"{type(exc).__name__}: {exc}"[:300]
                samples = []
            if samples:
                medians[label].append(statistics.median(samples))
            else:
                active.remove(label)
    return medians


#: the label suffix of a built variant timed with ``fixed_output`` (bench/conv_compare.py,
#: bench/serving_fp8.py: the buffers of a caller that drops its result)
FIXED_OUT = "_fixed_out"


def artifact_timer(
    harness: Any, req: dict[str, Any], artifact: str, fixed_output: bool = False
) -> Timer:
    """A built variant run through the harness with ``req`` (its log is the error); with
    ``fixed_output`` every launch writes output set 0 (the one buffer torch's caching allocator
    gives a call whose result is dropped) instead of each input set's own output."""

    def run() -> list[float]:
        answer = harness.run({**req, "artifact": artifact, "fixed_output": fixed_output})
        if not answer.get("samples_us"):
            raise RuntimeError(str(answer.get("log", ""))[-300:])
        return list(answer["samples_us"])

    return run


def launch_timer(
    harness: Any, fn: Callable[[int, int], None], sets: int, timing: dict[str, Any]
) -> Timer:
    """``fn(set_index, stream)`` (a torch call) timed as the harness times a variant."""
    return lambda: list(harness.wl.time_launches(fn, sets, abort_us=None, **timing).samples_us)


def time_artifacts(
    harness: Any,
    req: dict[str, Any],
    row: dict[str, Any],
    artifacts: dict[str, str | None],
    rounds: int = 1,
) -> dict[str, float]:
    """Median microseconds of each labelled artifact run with ``req`` (see
    ``interleaved_medians``); labels without an artifact are skipped."""
    timers = {
        label: artifact_timer(harness, req, artifact)
        for label, artifact in artifacts.items()
        if artifact
    }
    return interleaved_medians(timers, row, rounds)
