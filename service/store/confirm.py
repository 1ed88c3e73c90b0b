"""Who may confirm a winner: the one module that says so.

A best config is ``confirmed`` once a worker *independent* of the one that measured the
winner re-measured the same variant (by name) for the same key (problem, device key,
toolchain) with a verified median inside the tie band of the winner's
(:func:`tuner.winner.same_speed`: two hosts share no rounds, so their medians are compared).

Independent (:func:`independent`) means another machine and other physical devices, not
merely another token: both workers registered a host identity (``WorkerRegister.host``,
made by :mod:`tuner.host`), their host fingerprints differ, and no physical device id of
one is among the other's. A restarted ``tunehub serve`` mints a new local-worker token on
the same machine; it is not a second opinion. A worker without a host identity (an agent
too old to send one) neither confirms nor is confirmed by anyone. The same device measuring
again is a re-measure: stored, shown with the job, never a confirmation.

A job submitted with ``confirm: 2`` (or every job, with ``TUNEHUB_CONFIRM=2``) asks for that:
when one of its tasks finishes with a winner, a re-measuring task of the same problem is
queued that only an independent worker holding the winner's device key may lease
(:func:`lease_clause`, used by ``service.store.queue.claim_task``).

``confirmed`` is recomputed from the stored measurements whenever a final upload or an
import touches the key, so it does not depend on the order in which the two workers finish.

Records (TUNEHUB_RECORD_MARGIN): a winner that beats the stored one by more than the team's
margin is held (``best_configs.pending_measurement_id``, :func:`service.store.best.upsert_best`)
and a re-measuring task is queued for it as for ``confirm: 2``; the stored winner is served
until an independent worker's measurement of the record lands within the tie band, which makes
the record the served, confirmed winner, or outside it, which drops the record
(:func:`settle_pending`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import ColumnElement, and_, false, or_, select
from sqlalchemy.orm import Session, aliased

from service.schemas.common import DeviceFields
from service.store.keys import same_best_key
from service.store.models import (
    BestConfig,
    Device,
    Job,
    Measurement,
    Task,
    Variant,
    Worker,
    WorkerDevice,
    utcnow,
)
from service.store.rows import columns
from tuner import winner as winner_rule

__all__ = [
    "independent",
    "refresh_confirmed",
    "settle_pending",
    "refresh_key",
    "queue_confirmation",
    "lease_clause",
]

log = logging.getLogger(__name__)


def independent(measured_by: Worker | None, other: Worker | None) -> bool:
    """Whether ``other`` may confirm what ``measured_by`` measured: both have a host identity,
    their hosts differ and they share no physical device."""
    if measured_by is None or other is None:
        return False
    if not measured_by.host_fingerprint or not other.host_fingerprint:
        return False
    if measured_by.host_fingerprint == other.host_fingerprint:
        return False
    return not set(measured_by.device_uids or ()) & set(other.device_uids or ())


def _worker(session: Session, worker_id: str | None) -> Worker | None:
    return session.get(Worker, worker_id) if worker_id is not None else None


def _verdict(session: Session, best: BestConfig, measured: Measurement | None) -> bool | None:
    """Whether an independent worker re-measured ``measured``'s variant for the key of
    ``best`` within the tie band (True), re-measured it only outside it (False), or has not
    (None)."""
    current = measured
    variant = session.get(Variant, current.variant_id) if current is not None else None
    owner = _worker(session, current.worker_id) if current is not None else None
    if current is None or variant is None or current.median_us is None or owner is None:
        return None
    rows = session.execute(
        select(Measurement.median_us, Worker)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Worker, Worker.id == Measurement.worker_id)
        .where(
            *same_best_key(Measurement, best),
            Measurement.outcome == "ok",
            Measurement.id != current.id,
            Variant.name == variant.name,
            Worker.host_fingerprint.is_not(None),
            Worker.host_fingerprint != owner.host_fingerprint,
        )
    ).all()
    winner_us = current.median_us
    medians = [m for m, worker in rows if m is not None and independent(owner, worker)]
    if not medians:
        return None
    return any(winner_rule.same_speed(m, winner_us) for m in medians)


def refresh_confirmed(session: Session, best: BestConfig) -> bool:
    """Set and return ``best.confirmed`` from the measurements of its key (module doc)."""
    best.confirmed = _verdict(session, best, session.get(Measurement, best.measurement_id)) is True
    return best.confirmed


def settle_pending(session: Session, best: BestConfig) -> str | None:
    """Decide the key's held record (``pending_measurement_id``, TUNEHUB_RECORD_MARGIN): once
    an independent worker re-measured it within the tie band it becomes the served winner,
    confirmed ("promoted"); re-measured only outside the band, it is dropped ("refuted");
    else it stays held (None)."""
    if best.pending_measurement_id is None:
        return None
    pending = session.get(Measurement, best.pending_measurement_id)
    verdict = _verdict(session, best, pending) if pending is not None else False
    if verdict is None:
        return None
    best.pending_measurement_id = None
    if not verdict or pending is None:
        log.warning("best config %s: held record refuted by another host", best.id)
        return "refuted"
    variant = session.get(Variant, pending.variant_id)
    best.measurement_id = pending.id
    best.confirmed = True
    best.tie_set = [variant.name] if variant is not None else None
    best.updated_at = utcnow()
    log.info("best config %s: held record confirmed by another host, now served", best.id)
    return "promoted"


def refresh_key(session: Session, job: Job, task: Task, device_id: int, toolchain_id: int) -> None:
    """Refresh ``confirmed`` of the best config of the task's problem on this device and
    toolchain, if there is one (its measurements may have just confirmed it)."""
    best = session.scalars(
        select(BestConfig).where(
            BestConfig.op == job.op,
            BestConfig.dtype == job.dtype,
            BestConfig.layout == job.layout,
            BestConfig.problem_key == task.problem_key,
            BestConfig.device_id == device_id,
            BestConfig.toolchain_id == toolchain_id,
        )
    ).first()
    if best is not None:
        refresh_confirmed(session, best)
        settle_pending(session, best)


def queue_confirmation(
    session: Session, job: Job, task: Task, winner: Measurement, *, held: bool = False
) -> Task | None:
    """Queue the re-measuring task of ``task`` when its job asks for confirmation, or its
    winner is a ``held`` record; None when neither (or ``task`` is a re-measuring task)."""
    if (job.confirm < 2 and not held) or task.confirm_of is not None:
        return None
    confirm = Task(
        job_id=job.id,
        **columns(task, "position", "problem", "problem_key"),
        confirm_of=task.id,
        confirm_device_id=winner.device_id,
    )
    session.add(confirm)
    session.flush()
    return confirm


def _confirmable(session: Session, worker: Worker, job_ids: Sequence[str]) -> list[str]:
    """The queued re-measuring tasks of these jobs that ``worker`` is independent enough to
    take: the worker that measured the winner is another host with other devices."""
    if not worker.host_fingerprint or not job_ids:
        return []
    original = aliased(Task)
    rows = session.execute(
        select(Task.id, Worker)
        .join(original, original.id == Task.confirm_of)
        .join(Measurement, Measurement.id == original.winner_measurement_id)
        .join(Worker, Worker.id == Measurement.worker_id)
        .where(Task.job_id.in_(job_ids), Task.status == "queued", Task.confirm_of.is_not(None))
    ).all()
    return [task_id for task_id, measured_by in rows if independent(measured_by, worker)]


def lease_clause(
    session: Session, worker: Worker, device: DeviceFields | None, job_ids: Sequence[str]
) -> ColumnElement[bool]:
    """Which tasks of ``job_ids`` the worker may lease, as far as confirmation goes: every
    ordinary task; a re-measuring task (job confirm 2) only when the worker holds the
    winner's device key (the leasing slot's, when given) and is independent of the worker
    that measured the winner."""
    own_devices = select(WorkerDevice.device_id).where(WorkerDevice.worker_id == worker.id)
    if device is not None:
        own_devices = own_devices.join(Device, Device.id == WorkerDevice.device_id).where(
            Device.backend == device.backend,
            Device.name == device.name,
            Device.arch == device.arch,
            Device.sm_count == device.sm_count,
        )
    allowed = _confirmable(session, worker, job_ids)
    return or_(
        Task.confirm_of.is_(None),
        and_(Task.confirm_device_id.in_(own_devices), Task.id.in_(allowed)) if allowed else false(),
    )
