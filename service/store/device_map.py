"""Which devices a worker token may serve: the map an admin keeps (``token_devices``).

A worker says which devices it has; a map makes that claim checkable. An admin maps a worker
token to device keys (``backend:name:arch:sm_count``), each optionally pinned to the hashed id
of a physical device (``key@uid``: ``tuner.host.device_uid``, a GPU's UUID as NVML reports
it, hashed; ``GET /v1/workers`` shows what each host sent). Then:

- registering a worker is refused (403) for a device whose key the token is not mapped to, or
  whose mapped uids are none of those the host identity carries;
- an upload is refused (403) for a device key the token is not mapped to (a map changed
  after registration takes effect at once).

A token with no map serves any device, unless ``TUNEHUB_DEVICE_MAP_REQUIRED``: then it serves
none. Admin tokens are not bound (an admin may act for anyone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service.errors import Forbidden, InvalidInput
from service.schemas.common import DeviceFields
from service.store.models import ApiToken, TokenDevice
from tuner.registry import BACKENDS

__all__ = [
    "device_key",
    "parse_entry",
    "entry_text",
    "token_entries",
    "set_entries",
    "check_devices",
]

_UID = re.compile(r"^[0-9a-f]{16,64}$")


def device_key(device: DeviceFields) -> str:
    """A device's key, as Device.key() writes it."""
    return f"{device.backend}:{device.name}:{device.arch}:{device.sm_count}"


def parse_entry(text: str, loc: Sequence[str | int]) -> tuple[str, str | None]:
    """(device key, uid or None) of ``key`` or ``key@uid``; InvalidInput at ``loc``."""
    key, uid = text, None
    head, at, tail = text.rpartition("@")
    if at and _UID.match(tail):
        key, uid = head, tail
    parts = key.split(":")
    if len(parts) < 4 or parts[0] not in BACKENDS or not parts[-1].isdigit() or not parts[-2]:
        raise InvalidInput(
            list(loc),
            f"{text[:100]!r} is not a device key backend:name:arch:sm_count (optionally "
            f"@uid, a hashed device id); backends: {', '.join(BACKENDS)}",
        )
    if not ":".join(parts[1:-2]) or int(parts[-1]) < 1:
        raise InvalidInput(list(loc), f"{text[:100]!r}: the name is empty or sm_count < 1")
    return key, uid


def entry_text(row: TokenDevice) -> str:
    return row.device_key if row.device_uid is None else f"{row.device_key}@{row.device_uid}"


def token_entries(session: Session, token_id: int) -> list[TokenDevice]:
    return list(
        session.scalars(
            select(TokenDevice).where(TokenDevice.token_id == token_id).order_by(TokenDevice.id)
        )
    )


def set_entries(session: Session, token_id: int, entries: Iterable[tuple[str, str | None]]) -> None:
    """Replace the token's map with ``entries`` (empty: no map). The caller commits."""
    session.execute(delete(TokenDevice).where(TokenDevice.token_id == token_id))
    for key, uid in dict.fromkeys(entries):
        session.add(TokenDevice(token_id=token_id, device_key=key, device_uid=uid))
    session.flush()


def check_devices(
    session: Session,
    token: ApiToken,
    devices: Sequence[DeviceFields],
    host_uids: Iterable[str] | None,
    *,
    required: bool,
) -> None:
    """Forbidden naming the first device ``token`` may not serve (module doc). ``host_uids``:
    the hashed device ids of the registering host (None: not a registration, uids unchecked)."""
    if "admin" in token.scopes:
        return
    entries = token_entries(session, token.id)
    if not entries:
        if required:
            raise Forbidden(
                f"token {token.name!r} is mapped to no device, and this service requires a map "
                "(TUNEHUB_DEVICE_MAP_REQUIRED): an admin maps it with `tunehub token devices`"
            )
        return
    uids = set(host_uids) if host_uids is not None else None
    for device in devices:
        key = device_key(device)
        mapped = [row for row in entries if row.device_key == key]
        if not mapped:
            raise Forbidden(
                f"token {token.name!r} may not serve device {key}: it is mapped to "
                f"{', '.join(sorted({r.device_key for r in entries}))} (`tunehub token devices`)"
            )
        if uids is None or any(r.device_uid is None or r.device_uid in uids for r in mapped):
            continue
        raise Forbidden(
            f"token {token.name!r} may serve device {key} only from the physical devices an "
            "admin mapped (key@uid), and this host's identity names none of them"
        )
