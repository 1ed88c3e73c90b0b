"""How the UI names things: problems, device selectors, budgets, the ``suspect`` flag; and
the order problems sort in (by their dims as numbers, so k=256 < 1024 < 16384)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from tuner.nvml import SUSPECT_THROTTLE_MASK, THROTTLE_REASONS
from tuner.types import EngineConfig

__all__ = [
    "problem_label",
    "problem_sort_key",
    "natural_key",
    "selector_label",
    "device_label",
    "budget_label",
    "SUSPECT_TEXT",
]


def problem_label(problem: Mapping[str, Any]) -> str:
    """``m=128 n=4096 k=4096`` (dims in their canonical order, ``kind=sum`` for reduce)."""
    return " ".join(f"{k}={v}" for k, v in problem.items())


def _part(value: Any) -> tuple[int, float, str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return (1, 0.0, str(value))
    return (0, float(value), "")


def problem_sort_key(problem: Mapping[str, Any]) -> tuple[tuple[str, tuple[int, float, str]], ...]:
    """Sorts problems by their dims as numbers, dim by dim in canonical order."""
    return tuple((name, _part(value)) for name, value in problem.items())


_RUNS = re.compile(r"(\d+(?:\.\d+)?)")


def natural_key(text: str) -> tuple[tuple[int, float, str], ...]:
    """Text with its numbers compared as numbers (``m=128,k=256`` before ``m=128,k=1024``):
    the order of the stored ``problem_key`` texts."""
    return tuple(
        (0, float(part), "") if index % 2 else (1, 0.0, part)
        for index, part in enumerate(_RUNS.split(text))
        if part
    )


def selector_label(selector: Mapping[str, Any]) -> str:
    """A job's device selector: ``cuda NVIDIA H200 sm_90`` (what it names of the device)."""
    parts = [str(selector.get(key)) for key in ("backend", "name", "arch") if selector.get(key)]
    return " ".join(parts) or "any device"


def device_label(device: Mapping[str, Any]) -> str:
    """A measured device: ``NVIDIA H200 (cuda sm_90, 132 SMs)``; a CPU counts cores."""
    count = device.get("sm_count")
    units = "cores" if device.get("backend") == "cpu" else "SMs"
    inside = " ".join(str(device[k]) for k in ("backend", "arch") if device.get(k))
    if count:
        inside += f", {count} {units}"
    return f"{device.get('name') or '?'} ({inside})"


def budget_label(budget: Mapping[str, Any]) -> str:
    """``at most 8 variants, 60 s`` (or ``no limit``)."""
    parts = []
    if budget.get("max_variants"):
        parts.append(f"at most {budget['max_variants']} variants")
    if budget.get("max_seconds"):
        parts.append(f"{budget['max_seconds']:g} s")
    return ", ".join(parts) or "no limit"


def _suspect_text() -> str:
    share = next(f.default for f in dataclasses.fields(EngineConfig) if f.name == "min_cpu_share")
    reasons = ", ".join(
        name for bit, name in THROTTLE_REASONS.items() if bit & SUSPECT_THROTTLE_MASK
    )
    return (
        "Timed while something else may have slowed the device down. On a GPU, NVML "
        f"reported a slowdown ({reasons}) or another process used the GPU; on the CPU, the "
        f"run got less than {share:.0%} of a core (another process held it). Interference "
        "only slows a run down, so a suspect time is an upper bound: a suspect that could win "
        "is timed again once the device is quiet; the flag stays on a run never timed quietly."
    )


#: what ``suspect`` means, for a tooltip and a legend (tuner.types.BenchResult.suspect)
SUSPECT_TEXT = _suspect_text()
