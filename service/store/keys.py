"""Find-or-create rows by their identity keys (device, toolchain, variant), race-free.

Inserts use ``INSERT ... ON CONFLICT DO NOTHING`` (SQLite and PostgreSQL both have it) and
then select, so two uploads naming a new device at once never fail on the unique key.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.schemas.common import DeviceOut, ToolchainOut
from service.store.models import BEST_CONFIG_KEY, Device, Toolchain, Variant
from service.store.rows import columns
from tuner.types import Toolchain as ToolchainKey

#: rows per INSERT, well under SQLite's bound-parameter limit
_CHUNK = 500

__all__ = [
    "insert_ignore",
    "device_row",
    "toolchain_row",
    "ensure_variants",
    "selector_matches",
    "best_key",
    "same_best_key",
    "device_out",
    "toolchain_out",
]


def insert_ignore(session: Session, model: type[Any], rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` into ``model``'s table, skipping any that collide with a unique key."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    for start in range(0, len(rows), _CHUNK):
        session.execute(insert(model).values(rows[start : start + _CHUNK]).on_conflict_do_nothing())


def device_row(
    session: Session,
    *,
    backend: str,
    name: str,
    arch: str,
    sm_count: int,
    driver: str = "",
    runtime: str = "",
    memory_bytes: int = 0,
) -> Device:
    """The device with this key; driver/runtime/memory are refreshed to the latest report."""
    key = {"backend": backend, "name": name, "arch": arch, "sm_count": sm_count}
    insert_ignore(
        session,
        Device,
        [{**key, "driver": driver, "runtime": runtime, "memory_bytes": memory_bytes}],
    )
    device = session.scalars(select(Device).filter_by(**key)).one()
    if (driver, runtime) != (device.driver, device.runtime) and (driver or runtime):
        device.driver, device.runtime = driver, runtime
    if memory_bytes and memory_bytes != device.memory_bytes:
        device.memory_bytes = memory_bytes
    return device


def toolchain_row(
    session: Session, *, compiler: str, template_version: str, libraries: dict[str, str]
) -> Toolchain:
    key = ToolchainKey(compiler, template_version, dict(libraries)).key()
    insert_ignore(
        session,
        Toolchain,
        [
            {
                "key": key,
                "compiler": compiler,
                "template_version": template_version,
                "libraries": dict(libraries),
            }
        ],
    )
    return session.scalars(select(Toolchain).where(Toolchain.key == key)).one()


def ensure_variants(
    session: Session, op: str, variants: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """Store (id, name, params) variants that are not known yet."""
    unique = {vid: (name, params) for vid, name, params in variants}
    rows = [
        {"id": vid, "op": op, "name": name, "params": params}
        for vid, (name, params) in unique.items()
    ]
    insert_ignore(session, Variant, rows)


def selector_matches(selector: dict[str, Any], backend: str, name: str, arch: str) -> bool:
    """A job's device selector against a concrete device: backend equal, name a
    case-insensitive substring, arch equal."""
    if selector.get("backend") != backend:
        return False
    wanted_name = selector.get("name")
    if wanted_name and wanted_name.lower() not in name.lower():
        return False
    wanted_arch = selector.get("arch")
    return not wanted_arch or wanted_arch == arch


def best_key(row: Any) -> dict[str, Any]:
    """The best-config key of a measurement or best config row, as a dict."""
    return {column: getattr(row, column) for column in BEST_CONFIG_KEY}


def same_best_key(model: type[Any], row: Any) -> list[ColumnElement[bool]]:
    """WHERE clauses: ``model``'s rows with the best-config key of ``row``."""
    return [getattr(model, column) == value for column, value in best_key(row).items()]


def device_out(device: Device) -> DeviceOut:
    """A device row as the answers name it (with its key)."""
    described = columns(device, "backend", "name", "arch", "sm_count", "driver", "runtime")
    return DeviceOut(**described, memory_bytes=device.memory_bytes, key=device.key())


def toolchain_out(toolchain: Toolchain) -> ToolchainOut:
    """A toolchain row as the answers name it (with its key)."""
    return ToolchainOut(
        compiler=toolchain.compiler,
        template_version=toolchain.template_version,
        libraries=dict(toolchain.libraries or {}),
        key=toolchain.key,
    )
