"""Which machine, and which physical devices, a worker measures on: hashed identities.

    host = host_identity([backend.device() for backend in backends])
    host.fingerprint, host.device_uids          # sent with the worker's registration

The service lets a winner be *confirmed* only by a worker of another host whose devices are
not the winner's (``service.store.confirm``): a second token on the same machine, or the same
card measuring again, is a re-measure. These are the identities it compares.

- Host fingerprint: sha256 of ``tunehub-host:`` + the machine id: ``/etc/machine-id``
  (systemd), else ``/var/lib/dbus/machine-id``, else the host name and the MAC address Python
  reads (``uuid.getnode``; logged as weak). A container has its own machine id unless the
  host's is mounted into it (docs/deploy.md); its GPUs stay the host's, which is why the
  devices count too.
- Device uids: a GPU's UUID as the driver reports it (unique per card, whatever the host),
  else the host fingerprint + the PCI bus id; a CPU: the host fingerprint + the CPU model.
  Each is hashed (sha256, 32 hex digits), so no machine id or serial leaves the host.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.types import DeviceInfo

__all__ = ["HostInfo", "MACHINE_ID_FILES", "machine_id", "host_identity", "device_uid"]

log = logging.getLogger(__name__)

#: where the machine id is read from, first found wins
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")


@dataclass(frozen=True)
class HostInfo:
    """A worker's host fingerprint and the hashed ids of its physical devices."""

    fingerprint: str
    device_uids: tuple[str, ...]


def _digest(text: str, length: int = 64) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def machine_id(files: Sequence[str] = MACHINE_ID_FILES) -> str:
    """The machine id (module doc), or a weaker stand-in where no file holds one."""
    for name in files:
        try:
            text = Path(name).read_text().strip()
        except OSError:
            continue
        if text:
            return text
    log.warning(
        "no machine id in %s: the host fingerprint falls back to the host name and MAC "
        "address (mount the host's /etc/machine-id into a container; docs/deploy.md)",
        ", ".join(files),
    )
    return f"{platform.node()}/{uuid.getnode():012x}"


def device_uid(device: DeviceInfo, fingerprint: str) -> str:
    """The hashed id of one physical device of the host ``fingerprint`` (module doc)."""
    gpu = str(device.extra.get("uuid") or "")
    if gpu:
        raw = f"gpu:{gpu}"
    elif device.extra.get("pci_bus_id"):
        raw = f"pci:{fingerprint}:{device.extra['pci_bus_id']}"
    else:
        raw = f"{device.backend}:{fingerprint}:{device.name}"
    return _digest(raw, 32)


def host_identity(devices: Sequence[DeviceInfo], machine: str | None = None) -> HostInfo:
    """The identity of this host (or of ``machine``, a machine id) and of ``devices``."""
    fingerprint = _digest(f"tunehub-host:{machine if machine is not None else machine_id()}")
    uids = tuple(sorted({device_uid(d, fingerprint) for d in devices}))
    return HostInfo(fingerprint, uids)
