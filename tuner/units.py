"""Throughput in units a person reads: the one rule for the CLI and the web UI.

The engine stores a rate in one unit per kind of op (:func:`tuner.stats.throughput`):
TFLOP/s for ops that compute, GB/s for the others. Shown as stored, a CPU GEMM reads
"0.1 TFLOP/s". A rate is shown in the largest unit of its family in which it is at least 1,
down to MFLOP/s or MB/s::

    scale_rate(0.0523, "TFLOP/s")  # (52.3, "GFLOP/s")
    scale_rate(612.0, "TFLOP/s")   # (612.0, "TFLOP/s")
    scale_rate(0.4, "GB/s")        # (400.0, "MB/s")
    format_rate(4117.0, "GB/s")    # "4,117 GB/s"

The largest unit of a family is the one the engine stores: bandwidth stays in GB/s above
1000 (the unit of the copy rates and vendor figures it is read against), compute in TFLOP/s.
A unit outside these families, and zero, are shown as they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["RATE_FAMILIES", "scale_rate", "axis_scale", "format_rate", "format_number"]

#: each family's units, smallest first, with their size in the family's base unit
RATE_FAMILIES: tuple[tuple[tuple[str, float], ...], ...] = (
    (("MFLOP/s", 1e6), ("GFLOP/s", 1e9), ("TFLOP/s", 1e12)),
    (("MB/s", 1e6), ("GB/s", 1e9)),
)


def _family(unit: str) -> tuple[tuple[str, float], ...] | None:
    for family in RATE_FAMILIES:
        if any(name == unit for name, _ in family):
            return family
    return None


def _unit_for(magnitude: float, unit: str) -> tuple[float, str]:
    """(factor from ``unit``, unit) for a value of ``magnitude`` in ``unit``."""
    family = _family(unit)
    if family is None or magnitude == 0 or not math.isfinite(magnitude):
        return 1.0, unit
    size = dict(family)[unit]
    base = abs(magnitude) * size
    chosen_name, chosen_size = family[0]
    for name, candidate in family:
        if base >= candidate:
            chosen_name, chosen_size = name, candidate
    return size / chosen_size, chosen_name


def scale_rate(value: float, unit: str) -> tuple[float, str]:
    """``value`` in ``unit`` as (value, unit) in the largest unit where it is at least 1."""
    factor, name = _unit_for(value, unit)
    return value * factor, name


def axis_scale(values: Iterable[float], unit: str) -> tuple[float, str]:
    """(factor, unit) for an axis or table of ``values`` in ``unit``: the unit of the largest."""
    largest = max((abs(v) for v in values), default=0.0)
    return _unit_for(largest, unit)


def format_number(value: float) -> str:
    """Three significant digits or more: ``4,117``, ``52.3``, ``2.80``, ``0.0123``."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_rate(value: float | None, unit: str | None) -> str:
    """``value unit`` scaled by :func:`scale_rate`; ``–`` when there is no value."""
    if value is None:
        return "–"
    scaled, name = scale_rate(float(value), unit or "")
    return f"{format_number(scaled)} {name}".rstrip()
