"""The rows the UI pages show, read through the store's views (one query per table)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.schemas.common import MAX_ROW_ID
from service.store.models import (
    BestConfig,
    ClientBestConfig,
    ClientMeasurement,
    Device,
    Job,
    Measurement,
    Task,
    Toolchain,
    Variant,
)
from service.store.validation import usable_id
from service.store.views import device_dict, job_dict, measurement_dict, toolchain_dict

__all__ = [
    "MAX_ROWS",
    "list_jobs",
    "job_view",
    "job_measurements",
    "measurement_view",
    "best_rows",
    "client_best_rows",
    "choices",
]

#: rows per table page
MAX_ROWS = 500


def list_jobs(session: Session, status: str | None, op: str | None) -> list[dict[str, Any]]:
    query = select(Job).order_by(Job.created_at.desc(), Job.id).limit(MAX_ROWS)
    if status:
        query = query.where(Job.status == status)
    if op:
        query = query.where(Job.op == op)
    return [job_dict(session, job, with_problems=False) for job in session.scalars(query)]


def job_view(session: Session, job_id: str) -> dict[str, Any]:
    job = session.get(Job, job_id) if usable_id(job_id) else None
    if job is None:
        raise NotFound(f"job {job_id} not found")
    body = job_dict(session, job, with_problems=True)
    tasks = session.scalars(select(Task).where(Task.job_id == job.id))
    body["winner_ids"] = {t.id: t.winner_measurement_id for t in tasks}
    return body


def _measurement_rows(query: Any) -> Any:
    return (
        query.join(Variant, Variant.id == Measurement.variant_id)
        .join(Device, Device.id == Measurement.device_id)
        .join(Toolchain, Toolchain.id == Measurement.toolchain_id)
    )


def job_measurements(session: Session, job_id: str) -> list[dict[str, Any]]:
    """Every candidate of the job, timed ones first by problem and median."""
    query = _measurement_rows(select(Measurement, Variant, Device, Toolchain))
    rows = session.execute(query.where(Measurement.job_id == job_id).order_by(Measurement.id))
    items = [measurement_dict(m, v, d, t) for m, v, d, t in rows]
    items.sort(key=lambda m: (m["task_id"] or "", m["median_us"] is None, m["median_us"] or 0.0))
    return items


def measurement_view(session: Session, measurement_id: int) -> dict[str, Any]:
    if not 0 < measurement_id <= MAX_ROW_ID:  # no such row; PostgreSQL's int4 would overflow
        raise NotFound(f"measurement {measurement_id} not found")
    query = _measurement_rows(select(Measurement, Variant, Device, Toolchain))
    row = session.execute(query.where(Measurement.id == measurement_id)).first()
    if row is None:
        raise NotFound(f"measurement {measurement_id} not found")
    return measurement_dict(*row)


def best_rows(
    session: Session, device: str | None, op: str | None, toolchain: str | None
) -> list[dict[str, Any]]:
    """Best configs with their winning measurement, filtered by device key, op and toolchain
    key (exact values, as the page's filters offer them)."""
    query = (
        select(BestConfig, Measurement, Variant, Device, Toolchain)
        .join(Measurement, Measurement.id == BestConfig.measurement_id)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Device, Device.id == BestConfig.device_id)
        .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
        .order_by(BestConfig.op, BestConfig.dtype, BestConfig.problem_key)
        .limit(MAX_ROWS)
    )
    if op:
        query = query.where(BestConfig.op == op)
    if toolchain:
        query = query.where(Toolchain.key == toolchain)
    rows = session.execute(query).all()
    items = []
    for best, m, v, d, t in rows:
        if device and d.key() != device:
            continue
        item = measurement_dict(m, v, d, t)
        item["updated_at"] = best.updated_at
        items.append(item)
    return items


def client_best_rows(session: Session, device: str | None) -> list[dict[str, Any]]:
    query = (
        select(ClientBestConfig, ClientMeasurement, Device, Toolchain)
        .join(ClientMeasurement, ClientMeasurement.id == ClientBestConfig.measurement_id)
        .join(Device, Device.id == ClientBestConfig.device_id)
        .join(Toolchain, Toolchain.id == ClientBestConfig.toolchain_id)
        .order_by(ClientBestConfig.op, ClientBestConfig.key_text)
        .limit(MAX_ROWS)
    )
    items = []
    for best, m, d, t in session.execute(query).all():
        if device and d.key() != device:
            continue
        items.append(
            {
                "op": m.op,
                "kernel_name": m.kernel_name,
                "key": m.key,
                "config_name": m.config_name,
                "median_us": m.median_us,
                "p20_us": m.p20_us,
                "p80_us": m.p80_us,
                "provenance": m.provenance,
                "device": device_dict(d),
                "toolchain": toolchain_dict(t),
                "updated_at": best.updated_at,
            }
        )
    return items


def choices(session: Session) -> dict[str, list[str]]:
    """The values the best-config filters offer: devices, ops and toolchains with a winner."""
    devices = session.scalars(
        select(Device).where(Device.id.in_(select(BestConfig.device_id).distinct()))
    )
    toolchains = session.scalars(
        select(Toolchain.key).where(Toolchain.id.in_(select(BestConfig.toolchain_id).distinct()))
    )
    ops = session.scalars(select(BestConfig.op).distinct())
    return {
        "devices": sorted(d.key() for d in devices),
        "ops": sorted(ops),
        "toolchains": sorted(toolchains),
    }
