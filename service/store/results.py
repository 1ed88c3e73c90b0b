"""Storing a lease's measurements and upserting the best config, in one transaction.

Who wins and how the best config changes: :mod:`service.store.best` (the rule itself is
:mod:`tuner.winner`, the code the engine runs). Who may confirm: :mod:`service.store.confirm`.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidInput
from service.schemas.jobs import WinnerSummary
from service.schemas.worker import MeasurementIn, ResultsIn, ResultsOut
from service.store.best import decide_winner, incumbents_of, upsert_best
from service.store.checks import impossible, variant_clash, variant_id_error
from service.store.confirm import queue_confirmation, refresh_key
from service.store.jobs import winner_summary
from service.store.keys import (
    device_row,
    ensure_variants,
    insert_ignore,
    selector_matches,
    toolchain_row,
)
from service.store.models import (
    Device,
    Job,
    Lease,
    Measurement,
    Task,
    Variant,
    WorkerDevice,
    utcnow,
)
from service.store.queue import held_task, refresh_job_status
from service.store.replays import count_replays
from service.store.validation import usable_id
from tuner.acceptance import variant_rejection
from tuner.problems import problem_from_dict

__all__ = ["store_results"]

log = logging.getLogger(__name__)


def _check_device(job: Job, body: ResultsIn) -> None:
    device = body.device
    assert device is not None
    if not selector_matches(job.device, device.backend, device.name, device.arch):
        raise InvalidInput(
            ["body", "device"],
            f"device {device.backend}:{device.name}:{device.arch} does not match the job's "
            f"selector {job.device}",
        )


def _check_variants(
    session: Session,
    job: Job,
    task: Task,
    body: ResultsIn,
    new: set[str],
    verify: bool,
    device: Device,
) -> None:
    """422 naming the measurement (service.store.checks) whose verified timings beat what the
    device can do for the problem, or, of the ones to store, whose variant the op's space does not
    accept for the task's problem on the reported device (with ``verify``: or whose id is not
    a sha256), or whose id is stored with other params."""
    assert body.device is not None
    known = {row.id: row for row in session.scalars(select(Variant).where(Variant.id.in_(new)))}
    problem = problem_from_dict(job.op, dict(task.problem))
    for index, item in enumerate(body.measurements):
        loc: list[str | int] = ["body", "measurements", index]
        # only a verified result did the work; a wrong one may well have skipped it
        if item.outcome == "ok" and (item.variant_id in new or item.retimed):
            timings = {"min_us": item.min_us, "p20_us": item.p20_us, "median_us": item.median_us}
            found = impossible(problem, job.dtype, device, device.name, timings)
            if found is not None:
                raise InvalidInput([*loc, found[0]], f"impossible: {found[1]}")
        if item.variant_id not in new:
            continue
        if verify and (bad_id := variant_id_error(item.variant_id)) is not None:
            raise InvalidInput([*loc, "variant_id"], bad_id)
        clash = variant_clash(known.get(item.variant_id), job.op, item.variant_name, item.params)
        if clash is not None:
            raise InvalidInput([*loc, "variant_id"], clash)
        if not verify:
            continue
        reason = variant_rejection(
            job.op,
            body.device.backend,
            job.dtype,
            job.layout,
            body.device.arch,
            problem,
            item.params,
            item.variant_name,
            pruned_ok=item.outcome == "pruned",
        )
        if reason is not None:
            raise InvalidInput([*loc, "variant_name"], f"{item.variant_name!r}: {reason}")


def _check_registered(session: Session, worker_id: str, device_id: int, body: ResultsIn) -> None:
    registered = session.scalar(
        select(WorkerDevice.device_id).where(
            WorkerDevice.worker_id == worker_id, WorkerDevice.device_id == device_id
        )
    )
    if registered is None:
        assert body.device is not None
        raise InvalidInput(
            ["body", "device"],
            f"device {body.device.backend}:{body.device.name}:{body.device.arch}:"
            f"{body.device.sm_count} is not one this worker registered",
        )


def _stored_variants(session: Session, lease_id: str, variant_ids: set[str]) -> set[str]:
    """Which of ``variant_ids`` this lease has already stored (a retried upload)."""
    if not variant_ids:
        return set()
    return set(
        session.scalars(
            select(Measurement.variant_id).where(
                Measurement.lease_id == lease_id, Measurement.variant_id.in_(variant_ids)
            )
        )
    )


def _task_variants(
    session: Session, task: Task, device_id: int, toolchain_id: int, variant_ids: set[str]
) -> set[str]:
    """Which of ``variant_ids`` the task already holds for this device and toolchain, from
    any of its leases: a task leased again after its worker died keeps one row per variant."""
    if not variant_ids:
        return set()
    return set(
        session.scalars(
            select(Measurement.variant_id).where(
                Measurement.task_id == task.id,
                Measurement.device_id == device_id,
                Measurement.toolchain_id == toolchain_id,
                Measurement.variant_id.in_(variant_ids),
            )
        )
    )


def _replayed_answer(session: Session, task: Task, replayed: int) -> ResultsOut:
    """The answer of a final upload, given again to its retry (which stored nothing)."""
    winner = None
    if task.winner_measurement_id is not None:
        measurement = session.get(Measurement, task.winner_measurement_id)
        variant = session.get(Variant, measurement.variant_id) if measurement else None
        if measurement is not None and variant is not None:
            winner = winner_summary(measurement, variant, task)
    return ResultsOut(stored=0, replayed=replayed, kept=0, winner=winner, task_status=task.status)


def _lock_task(session: Session, lease_id: str) -> None:
    """Take the lease's task row for this transaction (a no-op UPDATE: a row lock on
    PostgreSQL, the write lock on SQLite), so that two copies of one upload arriving at once
    run one after the other and the second sees what the first stored."""
    lease = session.get(Lease, lease_id) if usable_id(lease_id) else None
    if lease is not None:
        session.execute(
            update(Task)
            .where(Task.id == lease.task_id)
            .values(lease_id=Task.lease_id)
            .execution_options(synchronize_session=False)
        )


#: what a re-timing replaces in the lease's row of its variant (MeasurementIn.retimed)
_RETIMED_FIELDS = (
    "outcome",
    "median_us",
    "p20_us",
    "p80_us",
    "min_us",
    "reps",
    "throughput",
    "suspect",
    "log",
    "provenance",
)


def _retime(session: Session, lease_id: str, item: MeasurementIn) -> None:
    """Replace the timing of the lease's stored row of ``item``'s variant (no row added)."""
    session.execute(
        update(Measurement)
        .where(Measurement.lease_id == lease_id, Measurement.variant_id == item.variant_id)
        .values({name: getattr(item, name) for name in _RETIMED_FIELDS})
        .execution_options(synchronize_session=False)
    )


def store_results(
    session: Session,
    lease_id: str,
    body: ResultsIn,
    *,
    verify: bool = True,
    record_margin: float | None = None,
) -> ResultsOut:
    """Store a batch for the lease; on ``final`` end the task and upsert the best config.

    Idempotent: a measurement is stored once per task, variant, device and toolchain (and the
    database keys rows by lease and variant), so a retried batch adds no rows (the answer
    counts it ``replayed``), a task leased again after its worker died keeps one row per
    variant (``kept``), and a retried final upload gets the winner of the first. A retry
    with other content under a variant the lease stored is a Conflict
    (:mod:`service.store.replays`). The device must be one the
    lease's worker registered, and with ``verify`` every variant one the op's space accepts
    for the problem on that device (:func:`tuner.acceptance.variant_rejection`). Raises NotFound
    (unknown lease), Conflict (lease lost, new measurements after the final one, or a retry
    that differs) or InvalidInput.
    Commits nothing; the caller commits once, so the batch and the upsert land together.
    """
    _lock_task(session, lease_id)
    lease, task = held_task(session, lease_id)
    batch = {item.variant_id: item for item in body.measurements}
    already = _stored_variants(session, lease.id, set(batch))
    retimed = {v for v, item in batch.items() if item.retimed and v in already}
    if task.status in ("done", "failed"):
        if body.final and set(batch) <= already:
            replayed = count_replays(session, lease.id, body, include_retimed=True)
            return _replayed_answer(session, task, replayed)
        raise Conflict(f"lease {lease_id} is finished: the task is {task.status}")
    # a variant this lease stored already is a replay (the same content) or a 409
    replayed = count_replays(session, lease.id, body)
    own = set(already)
    job = session.get(Job, task.job_id)
    assert job is not None
    device_id = toolchain_id = None
    rows: list[dict[str, Any]] = []
    if batch:
        assert body.device is not None and body.toolchain is not None
        _check_device(job, body)
        device = device_row(session, **body.device.model_dump())
        toolchain = toolchain_row(session, **body.toolchain.model_dump())
        device_id, toolchain_id = device.id, toolchain.id
        _check_registered(session, lease.worker_id, device.id, body)
        # a variant the task holds already (this lease's retried batch, or an earlier lease's
        # measurement) is not stored again; the first measurement stays
        already |= _task_variants(session, task, device.id, toolchain.id, set(batch))
        _check_variants(session, job, task, body, set(batch) - already, verify, device)
        ensure_variants(
            session, job.op, [(m.variant_id, m.variant_name, m.params) for m in batch.values()]
        )
        now = utcnow()
        rows = [
            {
                **item.model_dump(exclude={"variant_name", "params", "retimed"}),
                "task_id": task.id,
                "job_id": job.id,
                "op": job.op,
                "dtype": job.dtype,
                "layout": job.layout,
                "problem": task.problem,
                "problem_key": task.problem_key,
                "device_id": device.id,
                "toolchain_id": toolchain.id,
                "lease_id": lease.id,
                "worker_id": lease.worker_id,
                "created_at": now,
            }
            for variant_id, item in batch.items()
            if variant_id not in already
        ]
        # ON CONFLICT DO NOTHING: two concurrent retries of one batch store it once
        insert_ignore(session, Measurement, rows)
        for variant_id in retimed:
            _retime(session, lease.id, batch[variant_id])
    winner = (
        _finish(session, task, job, body, device_id, toolchain_id, record_margin)
        if body.final
        else None
    )
    session.flush()
    stored = len(rows) + len(retimed)
    return ResultsOut(
        stored=stored,
        replayed=replayed,
        # measured by an earlier lease of the task (its worker gone): the first row stays
        kept=len(already - own),
        winner=winner,
        task_status=task.status,
    )


def _finish(
    session: Session,
    task: Task,
    job: Job,
    body: ResultsIn,
    device_id: int | None,
    toolchain_id: int | None,
    record_margin: float | None,
) -> WinnerSummary | None:
    if device_id is None and body.device is not None and body.device.name:
        device_id = device_row(session, **body.device.model_dump()).id
    if toolchain_id is None and body.toolchain is not None and body.toolchain.compiler:
        toolchain_id = toolchain_row(session, **body.toolchain.model_dump()).id
    query = select(Measurement).where(Measurement.task_id == task.id)
    if device_id is not None and toolchain_id is not None:
        query = query.where(
            Measurement.device_id == device_id, Measurement.toolchain_id == toolchain_id
        )
    measurements = list(session.scalars(query))
    names = dict(
        session.execute(
            select(Variant.id, Variant.name).where(
                Variant.id.in_({m.variant_id for m in measurements})
            )
        ).all()
    )
    incumbents = incumbents_of(session, job, task, [] if device_id is None else [device_id])
    decision = decide_winner(measurements, names, job.objective, incumbents)
    winner = decision.winner
    tie_set = [names.get(m.variant_id, "") for m in decision.tie_set]
    task.tie_set = tie_set or None
    task.unmeasured = body.unmeasured if body.final else 0
    # best_configs answer the time objective: an energy winner stays on its task only
    held = False
    if winner is not None and job.objective == "time":
        outcome = upsert_best(
            session, winner, tie_set, task.unmeasured, record_margin=record_margin
        )
        held = outcome == "held"
        log.info(
            "task %s: winner %s, tie set %s (%s best config)",
            task.id,
            names[winner.variant_id],
            tie_set,
            outcome,
        )
        device_id, toolchain_id = winner.device_id, winner.toolchain_id
    if device_id is not None and toolchain_id is not None:
        refresh_key(session, job, task, device_id, toolchain_id)
    if task.status != "cancelled":
        if body.error:
            task.status, task.error = "failed", body.error
        else:
            task.status = "done"
            if winner is None and measurements:
                task.error = "no candidate verified"
            elif winner is not None:
                queue_confirmation(session, job, task, winner, held=held)
    task.winner_measurement_id = winner.id if winner is not None else None
    task.lease_expires_at = None
    if task.progress_total == 0:
        task.progress_done = task.progress_total = len(measurements)
    refresh_job_status(session, job)
    if winner is None:
        return None
    variant = session.get(Variant, winner.variant_id)
    assert variant is not None
    return winner_summary(winner, variant, task)
