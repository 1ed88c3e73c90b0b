"""NVML readings for a measurement's provenance; an empty dict wherever NVML is missing.

    reading = read_device(pci_bus_id="00000000:19:00.0")   # or index=0 (NVML's numbering)
    suspect_reasons(before, after, own_pids={os.getpid()})  # -> ["hardware slowdown", ...]

Only reads: nothing here changes clocks, power limits or modes.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

__all__ = [
    "read_device",
    "total_energy_mj",
    "suspect_reasons",
    "THROTTLE_REASONS",
    "SUSPECT_THROTTLE_MASK",
]

log = logging.getLogger(__name__)

#: NVML clock-event (throttle) reason bits and a readable name for each
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
#: the reasons that make a timing unrepresentative: thermal limits and hardware slowdowns.
#: Not the software power cap: a bandwidth- or tensor-core-bound kernel alone on an H200 runs
#: at its 700 W cap by itself (seen on every GEMM and softmax of a 2026-12-04 run), so the cap is
#: the kernel's own steady state, as it will be in production, not interference; re-measuring
#: it never clears. It stays in the reading's ``throttle`` list for the record.
SUSPECT_THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80

_initialised: bool | None = None


def _nvml() -> Any | None:
    global _initialised
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    if _initialised is None:
        try:
            pynvml.nvmlInit()
            _initialised = True
        except Exception as exc:  # no driver, no device, container without NVML
            log.debug("NVML unavailable: %s", exc)
            _initialised = False
    return pynvml if _initialised else None


def _safe(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception:
        return None


def read_device(index: int | None = None, pci_bus_id: str | None = None) -> dict[str, Any]:
    """Clocks (MHz), temperature (C), power (W), throttle reasons and GPU processes."""
    nv = _nvml()
    if nv is None:
        return {}
    handle = None
    if pci_bus_id:
        handle = _safe(nv.nvmlDeviceGetHandleByPciBusId, pci_bus_id)
    if handle is None:
        handle = _safe(nv.nvmlDeviceGetHandleByIndex, index or 0)
    if handle is None:
        return {}
    reasons = _safe(nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is None:
        reasons = _safe(nv.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    power_mw = _safe(nv.nvmlDeviceGetPowerUsage, handle)
    procs = _safe(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
    reading: dict[str, Any] = {
        "sm_clock_mhz": _safe(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": _safe(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
        "max_sm_clock_mhz": _safe(nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM),
        "temperature_c": _safe(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
        "power_w": power_mw / 1000.0 if power_mw is not None else None,
        "throttle_mask": int(reasons) if reasons is not None else None,
        "throttle": [name for bit, name in THROTTLE_REASONS.items() if reasons and reasons & bit],
        "utilization_pct": getattr(_safe(nv.nvmlDeviceGetUtilizationRates, handle), "gpu", None),
        "pids": sorted({int(p.pid) for p in procs}),
    }
    return reading


def total_energy_mj(index: int | None = None, pci_bus_id: str | None = None) -> int | None:
    """The device's total-energy counter (mJ since the driver loaded), None where unsupported."""
    nv = _nvml()
    if nv is None:
        return None
    handle = _safe(nv.nvmlDeviceGetHandleByPciBusId, pci_bus_id) if pci_bus_id else None
    if handle is None:
        handle = _safe(nv.nvmlDeviceGetHandleByIndex, index or 0)
    if handle is None:
        return None
    value = _safe(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
    return int(value) if value is not None else None


def suspect_reasons(
    before: dict[str, Any], after: dict[str, Any], own_pids: Collection[int] = ()
) -> list[str]:
    """Why a measurement bracketed by these readings may not be representative."""
    reasons: list[str] = []
    for reading in (before, after):
        mask = reading.get("throttle_mask") or 0
        for bit, name in THROTTLE_REASONS.items():
            if mask & bit & SUSPECT_THROTTLE_MASK and name not in reasons:
                reasons.append(name)
    listed = set(before.get("pids", [])) | set(after.get("pids", []))
    own = set(own_pids)
    if own & listed:
        others = sorted(listed - own)
    else:
        # in a pid namespace NVML lists host pids, so ours is unrecognisable: only a second
        # process tells that someone else used the GPU
        others = sorted(listed) if len(listed) > 1 else []
    if others:
        reasons.append(f"other processes on the GPU: {others}")
    return reasons
