"""Pieces shared by the vendor comparisons of one op (bench/vs_vendor_gemm.py,
bench/vs_vendor_conv.py): a tuning result's summary, the geomean, and timing a row's
artifacts (the tuned winner, the vendor's default) in the harness."""

from __future__ import annotations

import math
import statistics
from typing import Any

__all__ = ["geomean", "summary", "time_artifacts"]


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


def time_artifacts(
    harness: Any, req: dict[str, Any], row: dict[str, Any], artifacts: dict[str, str | None]
) -> dict[str, float]:
    """Median microseconds of each labelled artifact run with ``req``; a failure goes into
    ``row["compare_errors"][label]`` (the other labels and rows go on)."""
    times: dict[str, float] = {}
    for label, artifact in artifacts.items():
        if not artifact:
            continue
        try:
            answer = harness.run({**req, "artifact": artifact})
            if answer.get("samples_us"):
                times[label] = statistics.median(answer["samples_us"])
            else:
                row.setdefault("compare_errors", {})[label] = answer.get("log", "")[-300:]
        except Exception as exc:  # reported in the JSON; the other rows go on
            row.setdefault("compare_errors", {})[label] = f"{type(exc).__name__}: {exc}"[:300]
    return times
