"""How fast a device can possibly be: its copy rate and peak rates, and the rule that refuses a
measurement faster than physics allows (a planted 1e-6 us for a kernel that takes 35 us).

A device's rates are what an admin recorded for it (``PUT /v1/devices/{id}/rates``: the copy
rate a copy kernel reached, the peak TFLOP/s of its data sheet), else the defaults of its
product below (spec sheets, by a part of the product name), else none. A measurement of a
problem is impossible when

- any of its timings is under MIN_TIMING_US, 0.1 ns, on any device (less than one clock cycle
  of a 5 GHz core: no kernel call, however small its problem, is that fast);
- its compute rate, ``problem.flops() / time``, beats the dtype's peak by more than
  COMPUTE_SLACK;
- its memory rate, ``problem.bytes_moved() / time`` (read + written, as the copy rate
  counts), beats the copy rate by more than MEMORY_SLACK (inputs are rotated over twice the
  cache; the slack covers what a cache still gives a small problem).

The fastest timing it reports (min, p20 or median) is the one tested, of verified (``ok``)
measurements only: a kernel that gave a wrong answer may have skipped the work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.problems import Problem
from tuner.reference import ELEMENT_SIZE

__all__ = [
    "MIN_TIMING_US",
    "COMPUTE_SLACK",
    "MEMORY_SLACK",
    "PRODUCT_RATES",
    "DeviceRates",
    "rates_of",
    "impossible_reason",
]

MIN_TIMING_US = 1e-4
COMPUTE_SLACK = 1.25
MEMORY_SLACK = 1.5


@dataclass(frozen=True)
class DeviceRates:
    """A device's copy rate (GB/s, read + written) and peak rates (TFLOP/s by dtype), and
    where they come from ("recorded", "product", "none")."""

    copy_gbps: float | None = None
    peak_tflops: dict[str, float] = field(default_factory=dict)
    source: str = "none"


#: defaults by product (a case-insensitive part of the device name), from the data sheets:
#: memory bandwidth, and dense tensor-core TFLOP/s (f32: TF32, which a kernel may use)
PRODUCT_RATES: tuple[tuple[str, DeviceRates], ...] = (
    ("H200", DeviceRates(4800.0, {"f16": 989.0, "bf16": 989.0, "f32": 494.0}, "product")),
    ("H100", DeviceRates(3350.0, {"f16": 989.0, "bf16": 989.0, "f32": 494.0}, "product")),
    ("B200", DeviceRates(8000.0, {"f16": 2250.0, "bf16": 2250.0, "f32": 1100.0}, "product")),
    ("A100", DeviceRates(2039.0, {"f16": 312.0, "bf16": 312.0, "f32": 156.0}, "product")),
)


def rates_of(name: str, copy_gbps: float | None, peak_tflops: dict[str, Any] | None) -> DeviceRates:
    """The rates of a device named ``name`` with these recorded values (module doc)."""
    if copy_gbps is not None or peak_tflops:
        peaks = {str(k): float(v) for k, v in (peak_tflops or {}).items()}
        return DeviceRates(copy_gbps, peaks, "recorded")
    lowered = name.lower()
    for part, rates in PRODUCT_RATES:
        if part.lower() in lowered:
            return rates
    return DeviceRates()


def impossible_reason(
    problem: Problem, dtype: str, timings: dict[str, float | None], rates: DeviceRates
) -> tuple[str, str] | None:
    """(the field, why) when the timings are faster than the device can be for the problem;
    None when they are possible. ``timings``: the measurement's min_us, p20_us, median_us."""
    given = [(name, value) for name, value in timings.items() if value is not None]
    if not given:
        return None
    name, fastest = min(given, key=lambda item: item[1])
    if fastest < MIN_TIMING_US:
        return name, f"{fastest:g} us is under {MIN_TIMING_US:g} us: no kernel runs that fast"
    flops = problem.flops()
    peak = rates.peak_tflops.get(dtype)
    if flops > 0 and peak:
        tflops = flops / fastest / 1e6
        if tflops > peak * COMPUTE_SLACK:
            return name, (
                f"{fastest:g} us for {problem.key()} is {tflops:,.0f} TFLOP/s, over the device's "
                f"{dtype} peak of {peak:,.0f} TFLOP/s ({rates.source})"
            )
    if rates.copy_gbps:
        gbps = problem.bytes_moved(ELEMENT_SIZE.get(dtype, 4)) / fastest / 1e3
        if gbps > rates.copy_gbps * MEMORY_SLACK:
            return name, (
                f"{fastest:g} us for {problem.key()} moves {gbps:,.0f} GB/s, over the device's "
                f"copy rate of {rates.copy_gbps:,.0f} GB/s ({rates.source})"
            )
    return None
