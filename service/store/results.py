"""Storing a lease's measurements and upserting the best config, in one transaction.

Winner rule: only outcome ``ok`` can win (measurements flagged ``suspect`` only when no clean
one exists); the fastest median wins, and medians within TIE_BAND of the fastest are a tie
broken by variant name. A stored best config is replaced only when the new winner is more
than TIE_BAND faster, so re-tuning does not flip winners on noise. Import uses the same rule.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidInput
from service.schemas.worker import ResultsIn
from service.store.keys import (
    device_row,
    ensure_variants,
    insert_ignore,
    selector_matches,
    toolchain_row,
)
from service.store.models import BestConfig, Job, Measurement, Task, Variant, utcnow
from service.store.queue import held_task, refresh_job_status
from service.store.views import winner_dict

__all__ = ["TIE_BAND", "pick_winner", "upsert_best", "store_results"]

log = logging.getLogger(__name__)

#: relative band inside which two medians are the same speed
TIE_BAND = 0.02
UpsertOutcome = Literal["inserted", "replaced", "kept"]


def pick_winner(
    measurements: Sequence[Measurement], names: dict[str, str], objective: str = "time"
) -> Measurement | None:
    """The winning verified measurement (see the module doc), or None. Under objective energy:
    the least joules per launch among verified measurements that carry one."""
    verified = [m for m in measurements if m.outcome == "ok" and m.median_us is not None]
    clean = [m for m in verified if not m.suspect] or verified
    if not clean:
        return None
    if objective == "energy":
        metered = [m for m in clean if m.energy_j is not None]
        if not metered:
            return None
        return min(metered, key=lambda m: (m.energy_j or 0.0, names.get(m.variant_id, ""), m.id))
    best = min(m.median_us for m in clean if m.median_us is not None)
    tied = [m for m in clean if m.median_us is not None and m.median_us <= best * (1 + TIE_BAND)]
    return min(tied, key=lambda m: (names.get(m.variant_id, ""), m.variant_id, m.id))


def upsert_best(session: Session, candidate: Measurement) -> UpsertOutcome:
    """Make ``candidate`` (outcome ok) the best config of its key unless the current one is
    within TIE_BAND of it or faster."""
    key = {
        "op": candidate.op,
        "dtype": candidate.dtype,
        "layout": candidate.layout,
        "problem_key": candidate.problem_key,
        "device_id": candidate.device_id,
        "toolchain_id": candidate.toolchain_id,
    }
    now = utcnow()
    before = session.scalar(select(BestConfig.id).filter_by(**key))
    if before is None:
        row = {**key, "problem": candidate.problem, "measurement_id": candidate.id}
        insert_ignore(session, BestConfig, [{**row, "created_at": now, "updated_at": now}])
    query = select(BestConfig).filter_by(**key)
    if session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    best = session.scalars(query.execution_options(populate_existing=True)).one()
    if best.measurement_id == candidate.id:
        return "inserted"
    current = session.get(Measurement, best.measurement_id)
    current_median = current.median_us if current is not None else None
    assert candidate.median_us is not None
    if current_median is None or candidate.median_us < current_median * (1 - TIE_BAND):
        best.measurement_id = candidate.id
        best.updated_at = now
        return "replaced"
    return "kept"


def _check_device(job: Job, body: ResultsIn) -> None:
    device = body.device
    assert device is not None
    if not selector_matches(job.device, device.backend, device.name, device.arch):
        raise InvalidInput(
            ["body", "device"],
            f"device {device.backend}:{device.name}:{device.arch} does not match the job's "
            f"selector {job.device}",
        )


def store_results(session: Session, lease_id: str, body: ResultsIn) -> dict[str, Any]:
    """Store a batch for the lease; on ``final`` end the task and upsert the best config.

    Raises NotFound (unknown lease), Conflict (lease lost or already final) or InvalidInput.
    Commits nothing; the caller commits once, so the batch and the upsert land together.
    """
    _lease, task = held_task(session, lease_id)
    if task.status in ("done", "failed"):
        raise Conflict(f"lease {lease_id} is finished: the task is {task.status}")
    job = session.get(Job, task.job_id)
    assert job is not None
    stored: list[Measurement] = []
    device_id = toolchain_id = None
    if body.measurements:
        assert body.device is not None and body.toolchain is not None
        _check_device(job, body)
        device = device_row(session, **body.device.model_dump())
        toolchain = toolchain_row(session, **body.toolchain.model_dump())
        device_id, toolchain_id = device.id, toolchain.id
        ensure_variants(
            session, job.op, [(m.variant_id, m.variant_name, m.params) for m in body.measurements]
        )
        for item in body.measurements:
            fields = item.model_dump(exclude={"variant_name", "params"})
            measurement = Measurement(
                **fields,
                task_id=task.id,
                job_id=job.id,
                op=job.op,
                dtype=job.dtype,
                layout=job.layout,
                problem=task.problem,
                problem_key=task.problem_key,
                device_id=device.id,
                toolchain_id=toolchain.id,
            )
            session.add(measurement)
            stored.append(measurement)
        session.flush()
    winner = _finish(session, task, job, body, device_id, toolchain_id) if body.final else None
    session.flush()
    return {"stored": len(stored), "winner": winner, "task_status": task.status}


def _finish(
    session: Session,
    task: Task,
    job: Job,
    body: ResultsIn,
    device_id: int | None,
    toolchain_id: int | None,
) -> dict[str, Any] | None:
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
    winner = pick_winner(measurements, names, job.objective)
    # best_configs answer the time objective: an energy winner stays on its task only
    if winner is not None and job.objective == "time":
        outcome = upsert_best(session, winner)
        log.info("task %s: winner %s (%s best config)", task.id, names[winner.variant_id], outcome)
    if task.status != "cancelled":
        if body.error:
            task.status, task.error = "failed", body.error
        else:
            task.status = "done"
            if winner is None and measurements:
                task.error = "no candidate verified"
    task.winner_measurement_id = winner.id if winner is not None else None
    task.lease_expires_at = None
    if task.progress_total == 0:
        task.progress_done = task.progress_total = len(measurements)
    refresh_job_status(session, job)
    if winner is None:
        return None
    variant = session.get(Variant, winner.variant_id)
    assert variant is not None
    return winner_dict(winner, variant)
