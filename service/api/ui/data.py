"""The rows the UI pages show: the store's answer models, dumped to the dicts the templates read.

Filters go to SQL; the rows of a page are taken after them, so no filter drops rows that a
limit already cut (:class:`Page` says which rows of how many a page shows). Problems sort by
their dims as numbers (labels.problem_sort_key), which SQL cannot do on the stored key text:
a table's page is chosen from its filtered ids and keys, and only that page's rows are read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.ui.labels import natural_key, problem_sort_key
from service.errors import NotFound
from service.schemas.common import MAX_ROW_ID
from service.store.jobs import job_out, job_summary
from service.store.keys import device_out, toolchain_out
from service.store.measurements import joined_best, measurement_out
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
from service.store.queue import live_worker_devices, worker_live_seconds
from service.store.validation import usable_id

__all__ = [
    "PAGE_SIZE",
    "MAX_PAGE",
    "Page",
    "list_jobs",
    "job_view",
    "job_measurements",
    "measurement_view",
    "best_rows",
    "client_best_rows",
    "choices",
]

#: rows per table page
PAGE_SIZE = 100
#: the largest page number a link may ask for (past the last page: the last page)
MAX_PAGE = 1_000_000


@dataclass(frozen=True)
class Page:
    """Rows ``first``..``last`` (1-based) of ``total``, page ``number`` of ``pages``."""

    number: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def first(self) -> int:
        return min(self.total, (self.number - 1) * self.size + 1)

    @property
    def last(self) -> int:
        return min(self.total, self.number * self.size)

    @classmethod
    def of(cls, number: int, total: int, size: int | None = None) -> Page:
        """Page ``number`` of ``total`` rows (past the last: the last), ``PAGE_SIZE`` rows
        a page unless ``size`` says otherwise."""
        size = size or PAGE_SIZE
        pages = max(1, math.ceil(total / size))
        return cls(min(max(1, number), pages), size, total)

    def window(self, items: Sequence[Any]) -> Sequence[Any]:
        return items[(self.number - 1) * self.size : self.number * self.size]


def _live(session: Session, lease_seconds: int) -> list[Device]:
    """The devices of the live workers: the API's ``waiting_for`` reads them."""
    return live_worker_devices(session, worker_live_seconds(lease_seconds))


def list_jobs(
    session: Session, status: str | None, op: str | None, page: int, lease_seconds: int
) -> tuple[list[dict[str, Any]], Page]:
    """The newest jobs first, filtered in SQL, one page of them with ``waiting_for``."""
    filters = []
    if status:
        filters.append(Job.status == status)
    if op:
        filters.append(Job.op == op)
    total = session.scalar(select(func.count()).select_from(Job).where(*filters)) or 0
    shown = Page.of(page, total)
    query = (
        select(Job)
        .where(*filters)
        .order_by(Job.created_at.desc(), Job.id)
        .offset((shown.number - 1) * shown.size)
        .limit(shown.size)
    )
    live = _live(session, lease_seconds)
    return [job_summary(session, job, live).model_dump() for job in session.scalars(query)], shown


def job_view(session: Session, job_id: str, lease_seconds: int) -> dict[str, Any]:
    """The job with its problems (sorted by dims), winners and ``waiting_for``."""
    job = session.get(Job, job_id) if usable_id(job_id) else None
    if job is None:
        raise NotFound(f"job {job_id} not found")
    body = job_out(session, job, _live(session, lease_seconds)).model_dump()
    body["problems"].sort(key=lambda p: problem_sort_key(p["problem"]))
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
    """Every candidate of the job, by problem (dims as numbers), timed ones first by median;
    ``id`` is the order they were measured in."""
    query = _measurement_rows(select(Measurement, Variant, Device, Toolchain))
    rows = session.execute(query.where(Measurement.job_id == job_id).order_by(Measurement.id))
    items = [measurement_out(m, v, d, t).model_dump() for m, v, d, t in rows]
    items.sort(
        key=lambda m: (
            problem_sort_key(m["problem"]),
            m["task_id"] or "",
            m["median_us"] is None,
            m["median_us"] or 0.0,
        )
    )
    return items


def measurement_view(session: Session, measurement_id: int) -> dict[str, Any]:
    if not 0 < measurement_id <= MAX_ROW_ID:  # no such row; PostgreSQL's int4 would overflow
        raise NotFound(f"measurement {measurement_id} not found")
    query = _measurement_rows(select(Measurement, Variant, Device, Toolchain))
    row = session.execute(query.where(Measurement.id == measurement_id)).first()
    if row is None:
        raise NotFound(f"measurement {measurement_id} not found")
    return measurement_out(*row).model_dump()


def _device_ids(session: Session, device_key: str) -> list[int]:
    """The ids of the devices whose key is ``device_key`` (the devices table is small)."""
    return [d.id for d in session.scalars(select(Device)) if d.key() == device_key]


def best_rows(
    session: Session, device: str | None, op: str | None, toolchain: str | None, page: int
) -> tuple[list[dict[str, Any]], Page]:
    """One page of best configs with their winning measurement, filtered (in SQL) by device
    key, op and toolchain key (exact values, as the page's filters offer them), in the order
    op, dtype, layout, problem dims as numbers."""
    filters = []
    if op:
        filters.append(BestConfig.op == op)
    if toolchain:
        filters.append(
            BestConfig.toolchain_id.in_(select(Toolchain.id).where(Toolchain.key == toolchain))
        )
    if device:
        filters.append(BestConfig.device_id.in_(_device_ids(session, device)))
    keys = sorted(
        session.execute(
            select(
                BestConfig.id,
                BestConfig.op,
                BestConfig.dtype,
                BestConfig.layout,
                BestConfig.problem_key,
                BestConfig.device_id,
            ).where(*filters)
        ).all(),
        key=lambda r: (r[1], r[2], r[3], natural_key(r[4]), r[5], r[0]),
    )
    shown = Page.of(page, len(keys))
    ids = [r[0] for r in shown.window(keys)]
    rows = session.execute(joined_best().where(BestConfig.id.in_(ids))).all()
    position = {best_id: index for index, best_id in enumerate(ids)}
    items = []
    for best, m, v, d, t in sorted(rows, key=lambda row: position[row[0].id]):
        item = measurement_out(m, v, d, t).model_dump()
        item["updated_at"] = best.updated_at
        items.append(item)
    return items, shown


def client_best_rows(
    session: Session, device: str | None, page: int
) -> tuple[list[dict[str, Any]], Page]:
    """One page of client-measured winners, filtered by device key in SQL, by op and key."""
    filters = [ClientBestConfig.device_id.in_(_device_ids(session, device))] if device else []
    keys = sorted(
        session.execute(
            select(ClientBestConfig.id, ClientBestConfig.op, ClientBestConfig.key_text).where(
                *filters
            )
        ).all(),
        key=lambda r: (r[1], natural_key(r[2]), r[0]),
    )
    shown = Page.of(page, len(keys))
    ids = [r[0] for r in shown.window(keys)]
    query = (
        select(ClientBestConfig, ClientMeasurement, Device, Toolchain)
        .join(ClientMeasurement, ClientMeasurement.id == ClientBestConfig.measurement_id)
        .join(Device, Device.id == ClientBestConfig.device_id)
        .join(Toolchain, Toolchain.id == ClientBestConfig.toolchain_id)
        .where(ClientBestConfig.id.in_(ids))
    )
    position = {best_id: index for index, best_id in enumerate(ids)}
    items = []
    for best, m, d, t in sorted(session.execute(query).all(), key=lambda r: position[r[0].id]):
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
                "device": device_out(d).model_dump(),
                "toolchain": toolchain_out(t).model_dump(),
                "updated_at": best.updated_at,
            }
        )
    return items, shown


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
