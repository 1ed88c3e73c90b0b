"""The device key of a torch device, as workers register it: ``backend:name:arch:sm_count``.

Lookups match ``device=`` against a device's full key first (service/store/lookup.py), so the
key must be spelled exactly as the worker's backend spells its device:

- CUDA (tuner/backends/cuda_harness.py ``probe``): torch's device properties, ``name``,
  ``sm_<major><minor>`` and ``multi_processor_count``;
- CPU (tuner/backends/cpu.py, cpu_host.py): the ``model name`` of /proc/cpuinfo, the best
  vector ISA level of the first core's flags (``x86_64-avx512``, ``x86_64-avx2``, ...; the
  machine name elsewhere) and ``os.cpu_count()``.

The integrations may not import ``tuner`` (they run in users' processes), so the CPU rule is
reproduced here; tests/service/test_torch_device.py checks it against tuner's.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path

import torch

__all__ = ["device_key", "cpu_device_key", "cuda_device_key", "isa_level", "backend_of_key"]

#: the CPU flags that decide the ISA level (a subset of tuner's SIMD_FLAG_PATTERN)
_SIMD_FLAG = re.compile(r"^(sse\d?(_\d)?|ssse3|avx\w*|fma|f16c|amx\w*|asimd\w*|sve\w*|neon)$")


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


def isa_level(machine: str, flags: list[str]) -> str:
    """The best vector ISA level, e.g. ``x86_64-avx512``; the machine name off x86."""
    if machine in ("x86_64", "AMD64"):
        if "avx512f" in flags:
            return "x86_64-avx512"
        if "avx2" in flags:
            return "x86_64-avx2"
        if any(f.startswith("sse") for f in flags):
            return "x86_64-sse"
        return "x86_64"
    return machine or "unknown"


@functools.cache
def cpu_device_key() -> str:
    name = _cpuinfo_field("model name") or platform.processor() or platform.machine() or "cpu"
    raw = _cpuinfo_field("flags") or _cpuinfo_field("Features")
    flags = sorted(f for f in raw.split() if _SIMD_FLAG.match(f))
    arch = isa_level(platform.machine(), flags)
    return f"cpu:{name}:{arch}:{os.cpu_count() or 1}"


@functools.cache
def cuda_device_key(index: int) -> str:
    props = torch.cuda.get_device_properties(index)
    return f"cuda:{props.name}:sm_{props.major}{props.minor}:{props.multi_processor_count}"


def device_key(device: torch.device) -> str:
    """The key of ``device``; ValueError for a device type tunehub has no backend for."""
    if device.type == "cpu":
        return cpu_device_key()
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return cuda_device_key(index)
    raise ValueError(f"no tunehub backend for {device.type} tensors")


def backend_of_key(key: str) -> str:
    return key.split(":", 1)[0]
