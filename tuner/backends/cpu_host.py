"""What the CPU backend reads about its host: model, ISA level, load and clock.

Every reader returns a neutral value when the file is missing (containers, non-Linux hosts):
provenance is best effort, never a reason to fail a task.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from pathlib import Path
from typing import Any

__all__ = [
    "cpu_model_name",
    "cpu_flags",
    "isa_level",
    "memory_bytes",
    "load_average",
    "cpu_mhz",
    "host_snapshot",
    "hostname",
    "SIMD_FLAG_PATTERN",
]

#: the /proc/cpuinfo flags that say what vector code can run (kept in DeviceInfo.extra)
SIMD_FLAG_PATTERN = re.compile(
    r"^(sse\d?(_\d)?|ssse3|avx\w*|fma|f16c|amx\w*|asimd\w*|sve\w*|neon)$"
)


def _cpuinfo_field(name: str) -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def cpu_model_name() -> str:
    return _cpuinfo_field("model name") or platform.processor() or platform.machine() or "cpu"


def cpu_flags() -> list[str]:
    """The SIMD-related feature flags of the first core (x86 "flags", Arm "Features")."""
    raw = _cpuinfo_field("flags") or _cpuinfo_field("Features")
    return sorted(f for f in raw.split() if SIMD_FLAG_PATTERN.match(f))


def isa_level(machine: str, flags: list[str]) -> str:
    """The best vector ISA level of the host, e.g. ``x86_64-avx512``; the machine otherwise."""
    if machine in ("x86_64", "AMD64"):
        if "avx512f" in flags:
            return "x86_64-avx512"
        if "avx2" in flags:
            return "x86_64-avx2"
        if any(f.startswith("sse") for f in flags):
            return "x86_64-sse"
        return "x86_64"
    return machine or "unknown"


def memory_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def cpu_mhz() -> float | None:
    """Current clock of core 0, from cpufreq or /proc/cpuinfo (None when neither says)."""
    try:
        khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").read_text()
        return int(khz.strip()) / 1000.0
    except (OSError, ValueError):
        pass
    try:
        return float(_cpuinfo_field("cpu MHz"))
    except ValueError:
        return None


def host_snapshot() -> dict[str, Any]:
    """Load and clock right now, for the before/after provenance of a measurement."""
    return {"loadavg_1m": load_average(), "cpu_mhz": cpu_mhz()}


def hostname() -> str:
    return socket.gethostname()
