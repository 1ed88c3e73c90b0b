"""The CUDA devices of this host, and the ``--devices 0,2`` choice among them.

    gpus = discover_cuda_devices()                     # nvidia-smi, else NVML; [] without a GPU
    chosen = choose_devices(parse_device_list("0,2"), gpus)

Indices are nvidia-smi's (PCI bus order). CUDA numbers devices fastest first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so :data:`PCI_ORDER_ENV` goes into every harness's
environment beside ``CUDA_VISIBLE_DEVICES=<index>``: index 2 is then the same card for
nvidia-smi, NVML and the harness. Nothing here imports torch or touches a device's settings.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.errors import InvalidRequestError
from tuner.spawn import run_tool

__all__ = [
    "CudaDeviceEntry",
    "PCI_ORDER_ENV",
    "discover_cuda_devices",
    "parse_nvidia_smi",
    "parse_device_list",
    "choose_devices",
    "MAX_DEVICES",
]

log = logging.getLogger(__name__)

#: makes CUDA's device numbering agree with nvidia-smi's
PCI_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
#: GPUs a host may have at most (and the largest index ``--devices`` accepts, minus one)
MAX_DEVICES = 64
_QUERY = "index,name,pci.bus_id,uuid,memory.total"
_SMI_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CudaDeviceEntry:
    """One GPU as nvidia-smi lists it (before any harness opened it)."""

    index: int
    name: str
    pci_bus_id: str = ""
    uuid: str = ""
    memory_mib: int = 0


def parse_nvidia_smi(text: str) -> list[CudaDeviceEntry]:
    """Rows of ``nvidia-smi --query-gpu=index,name,pci.bus_id,uuid,memory.total
    --format=csv,noheader,nounits``; lines that do not parse are skipped."""
    entries = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 2 or not fields[0].isdigit():
            continue
        memory = fields[4] if len(fields) > 4 and fields[4].isdigit() else "0"
        entries.append(
            CudaDeviceEntry(
                index=int(fields[0]),
                name=fields[1],
                pci_bus_id=fields[2] if len(fields) > 2 else "",
                uuid=fields[3] if len(fields) > 3 else "",
                memory_mib=int(memory),
            )
        )
    return sorted(entries, key=lambda e: e.index)


def _from_nvidia_smi(executable: str) -> list[CudaDeviceEntry] | None:
    try:
        proc = run_tool(
            [executable, f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
            timeout=_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    if proc.returncode != 0:
        log.warning("nvidia-smi exited %d: %s", proc.returncode, proc.stderr.strip()[-300:])
        return None
    return parse_nvidia_smi(proc.stdout)


def _from_nvml() -> list[CudaDeviceEntry]:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        entries = []
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            pci = pynvml.nvmlDeviceGetPciInfo(handle).busId
            entries.append(
                CudaDeviceEntry(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    pci_bus_id=pci.decode() if isinstance(pci, bytes) else str(pci),
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) >> 20,
                )
            )
        return entries
    except Exception as exc:  # no driver, no device, a container without NVML
        log.warning("NVML lists no GPU: %s", exc)
        return []


def discover_cuda_devices(nvidia_smi: str | None = None) -> list[CudaDeviceEntry]:
    """This host's GPUs in nvidia-smi's order; NVML when nvidia-smi is missing; [] for none."""
    executable = nvidia_smi or shutil.which("nvidia-smi")
    if executable:
        found = _from_nvidia_smi(executable)
        if found is not None:
            return found
    return _from_nvml()


def parse_device_list(text: str) -> tuple[int, ...]:
    """``"0,2"`` -> ``(0, 2)``; anything else is an InvalidRequestError naming ``devices``."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise InvalidRequestError(
            "devices", f"expected GPU indices separated by commas, like 0,2; got {text!r}"
        )
    indices = []
    for part in parts:
        if not part.isdigit() or not part.isascii():
            raise InvalidRequestError(
                "devices", f"{part!r} is not a GPU index (a number >= 0, as nvidia-smi counts)"
            )
        index = int(part)
        if index >= MAX_DEVICES:
            raise InvalidRequestError(
                "devices", f"{index} is not a GPU index (at most {MAX_DEVICES - 1})"
            )
        if index in indices:
            raise InvalidRequestError("devices", f"GPU {index} is named twice")
        indices.append(index)
    return tuple(indices)


def choose_devices(
    wanted: Sequence[int] | None, found: Sequence[CudaDeviceEntry]
) -> list[CudaDeviceEntry]:
    """The GPUs to drive: every one found when ``wanted`` is None, else those indices in order."""
    if not found:
        raise InvalidRequestError("devices", "no CUDA device found on this host (nvidia-smi, NVML)")
    if wanted is None:
        return list(found)
    by_index = {entry.index: entry for entry in found}
    missing = [i for i in wanted if i not in by_index]
    if missing:
        have = ", ".join(str(i) for i in sorted(by_index))
        raise InvalidRequestError(
            "devices", f"no GPU {', '.join(map(str, missing))} on this host (it has {have})"
        )
    return [by_index[i] for i in wanted]
