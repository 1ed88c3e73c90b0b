"""Client-measured results (the Triton autotune drop-in): store an upload, keep the winner per
(op family, key, device, toolchain), answer lookups.

They live in their own tables (``client_measurements``, ``client_best_configs``) under op
families like ``triton:<kernel hash>``, which no built-in op can be named, so a client upload
can never replace a worker-verified best config. The winner rule is the service's: only
outcome ``ok`` wins, the fastest median, ties within TIE_BAND broken by config name, and a
stored winner is replaced only by one more than TIE_BAND faster (:mod:`tuner.winner`).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.schemas.client_results import (
    ClientBestOut,
    ClientResultsIn,
    ClientResultsOut,
    canonical_key,
)
from service.store.keys import device_out, device_row, insert_ignore, toolchain_out, toolchain_row
from service.store.lookup import find_devices
from service.store.models import ClientBestConfig, ClientMeasurement, Device, Toolchain, utcnow
from service.store.rows import columns, locked_row
from tuner import winner as winner_rule

__all__ = ["store_client_results", "find_client_best", "client_best_out"]

log = logging.getLogger(__name__)


def client_best_out(
    measurement: ClientMeasurement, device: Device, toolchain: Toolchain
) -> ClientBestOut:
    named = columns(measurement, "op", "kernel_name", "key", "config_name", "params")
    timing = columns(measurement, "median_us", "p20_us", "p80_us")
    return ClientBestOut(
        **named,
        **timing,
        device=device_out(device),
        toolchain=toolchain_out(toolchain),
        measured_at=measurement.created_at,
        source="client",
    )


def _winner(rows: list[ClientMeasurement]) -> ClientMeasurement | None:
    return winner_rule.decide(
        rows,
        median=lambda m: m.median_us,
        name=lambda m: (m.config_name, m.id),
        ok=lambda m: m.outcome == "ok",
    ).winner


def _upsert(session: Session, candidate: ClientMeasurement) -> str:
    key = {
        "op": candidate.op,
        "key_text": candidate.key_text,
        "device_id": candidate.device_id,
        "toolchain_id": candidate.toolchain_id,
    }
    now = utcnow()
    row = {**key, "measurement_id": candidate.id, "created_at": now, "updated_at": now}
    insert_ignore(session, ClientBestConfig, [row])
    best = locked_row(session, ClientBestConfig, key)
    if best.measurement_id == candidate.id:
        return "inserted"
    current = session.get(ClientMeasurement, best.measurement_id)
    current_median = current.median_us if current is not None else None
    assert candidate.median_us is not None
    if winner_rule.replaces_incumbent(current_median, candidate.median_us):
        best.measurement_id = candidate.id
        best.updated_at = now
        return "replaced"
    return "kept"


def store_client_results(
    session: Session, body: ClientResultsIn, token_id: int | None
) -> ClientResultsOut:
    """Store every measurement of the upload and upsert the key's winner. The caller commits."""
    device = device_row(session, **body.device.model_dump())
    toolchain = toolchain_row(session, **body.toolchain.model_dump())
    key_text = canonical_key(body.key)
    rows = []
    for item in body.measurements:
        row = ClientMeasurement(
            **columns(body, "op", "kernel_name", "key", "provenance"),
            **columns(item, "config_name", "params", "outcome", "log"),
            **columns(item, "median_us", "p20_us", "p80_us"),
            key_text=key_text,
            device_id=device.id,
            toolchain_id=toolchain.id,
            token_id=token_id,
        )
        session.add(row)
        rows.append(row)
    session.flush()
    winner = _winner(rows)
    outcome = _upsert(session, winner) if winner is not None else "none"
    session.flush()
    log.info("%s %s: %d client results, best %s", body.op, key_text, len(rows), outcome)
    try:
        best = find_client_best(session, body.op, body.key, device.key(), toolchain.key)
    except NotFound:
        best = None
    return ClientResultsOut(stored=len(rows), best=best, outcome=outcome)


def find_client_best(
    session: Session,
    op: str,
    key: dict[str, Any],
    device: str | None,
    toolchain: str | None = None,
    backend: str | None = None,
) -> ClientBestOut:
    """The exact key's winner on the device (a key or part of a name); with ``toolchain``
    (its key, compiler or template version) only that toolchain, else the newest one.
    Raises NotFound."""
    devices = {d.id: d for d in find_devices(session, device, backend)}
    rows = session.execute(
        select(ClientBestConfig, ClientMeasurement, Toolchain)
        .join(ClientMeasurement, ClientMeasurement.id == ClientBestConfig.measurement_id)
        .join(Toolchain, Toolchain.id == ClientBestConfig.toolchain_id)
        .where(
            ClientBestConfig.op == op,
            ClientBestConfig.key_text == canonical_key(key),
            ClientBestConfig.device_id.in_(list(devices)),
        )
    ).all()
    if toolchain is not None:
        rows = [r for r in rows if toolchain in (r[2].key, r[2].compiler, r[2].template_version)]
    if not rows:
        where = f" on {device}" if device else ""
        raise NotFound(f"{op} {canonical_key(key)}{where} has no client-measured config yet")
    best, measurement, chosen = max(rows, key=lambda r: (r[2].created_at, r[2].id, r[0].id))
    return client_best_out(measurement, devices[best.device_id], chosen)
