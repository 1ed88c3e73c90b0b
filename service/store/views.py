"""Rows to response dicts (shared by the routes, export and the job view)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.schemas.common import FINISHED_STATUSES
from service.schemas.measurement import MEASURED_FIELDS
from service.store.keys import same_best_key
from service.store.models import (
    ApiToken,
    BestConfig,
    Device,
    Job,
    Measurement,
    Task,
    Toolchain,
    Variant,
)

__all__ = [
    "device_dict",
    "toolchain_dict",
    "winner_dict",
    "measurement_dict",
    "job_dict",
    "count_by",
]


def device_dict(device: Device) -> dict[str, Any]:
    return {
        "backend": device.backend,
        "name": device.name,
        "arch": device.arch,
        "sm_count": device.sm_count,
        "driver": device.driver,
        "runtime": device.runtime,
        "memory_bytes": device.memory_bytes,
        "key": device.key(),
    }


def toolchain_dict(toolchain: Toolchain) -> dict[str, Any]:
    return {
        "compiler": toolchain.compiler,
        "template_version": toolchain.template_version,
        "libraries": dict(toolchain.libraries or {}),
        "key": toolchain.key,
    }


def winner_dict(
    measurement: Measurement, variant: Variant, task: Task | None = None
) -> dict[str, Any]:
    """A winner summary; with the task that chose it, its tie set and completeness too."""
    body: dict[str, Any] = {
        "variant_id": variant.id,
        "variant_name": variant.name,
        "params": variant.params,
        "median_us": measurement.median_us,
        "throughput": measurement.throughput,
        "throughput_unit": measurement.throughput_unit,
    }
    if task is not None:
        body["tie_set"] = list(task.tie_set or [variant.name])
        body["complete"] = task.unmeasured == 0
        body["unmeasured"] = task.unmeasured
    return body


def measurement_dict(
    measurement: Measurement, variant: Variant, device: Device, toolchain: Toolchain
) -> dict[str, Any]:
    return {
        "id": measurement.id,
        "job_id": measurement.job_id,
        "task_id": measurement.task_id,
        "op": measurement.op,
        "dtype": measurement.dtype,
        "layout": measurement.layout,
        "problem": measurement.problem,
        "variant_id": variant.id,
        "variant_name": variant.name,
        "params": variant.params,
        "outcome": measurement.outcome,
        **{name: getattr(measurement, name) for name in MEASURED_FIELDS},
        "log": measurement.log,
        "provenance": measurement.provenance,
        "suspect": measurement.suspect,
        "device": device_dict(device),
        "toolchain": toolchain_dict(toolchain),
        "created_at": measurement.created_at,
    }


def _owner_name(session: Session, job: Job) -> str | None:
    """The name of the token that submitted the job (None: stored before owners)."""
    if job.token_id is None:
        return None
    token = session.get(ApiToken, job.token_id)
    return token.name if token is not None else None


def job_dict(session: Session, job: Job, *, with_problems: bool) -> dict[str, Any]:
    """The job with its progress; per-problem status and winner when ``with_problems``."""
    tasks = list(session.scalars(select(Task).where(Task.job_id == job.id).order_by(Task.position)))
    finished = sum(task.status in FINISHED_STATUSES for task in tasks)
    body: dict[str, Any] = {
        "id": job.id,
        "status": job.status,
        "op": job.op,
        "dtype": job.dtype,
        "layout": job.layout,
        "device": job.device,
        "strategy": job.strategy,
        "budget": job.budget,
        "objective": job.objective,
        "seed": job.seed,
        "confirm": job.confirm,
        "submitted_by": _owner_name(session, job),
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "error": job.error,
        "total_tasks": len(tasks),
        "progress": {
            "tasks_done": finished,
            "tasks_total": len(tasks),
            "candidates_done": sum(task.progress_done for task in tasks),
            "candidates_total": sum(task.progress_total for task in tasks),
        },
    }
    if with_problems:
        winner_ids = [task.winner_measurement_id for task in tasks if task.winner_measurement_id]
        winners: dict[int, tuple[Measurement, Variant]] = {}
        kept: dict[int, dict[str, Any]] = {}
        if winner_ids:
            rows = session.execute(
                select(Measurement, Variant)
                .join(Variant, Variant.id == Measurement.variant_id)
                .where(Measurement.id.in_(winner_ids))
            ).all()
            winners = {m.id: (m, v) for m, v in rows}
            kept = _kept_incumbents(session, [m for m, _ in rows])
        body["problems"] = [
            {
                "task_id": task.id,
                "confirm_of": task.confirm_of,
                "problem": task.problem,
                "status": task.status,
                "winner": (
                    winner_dict(*winners[task.winner_measurement_id], task)
                    if task.winner_measurement_id in winners
                    else None
                ),
                "kept_incumbent": kept.get(task.winner_measurement_id or -1),
                "error": task.error,
            }
            for task in tasks
        ]
    return body


def _kept_incumbents(
    session: Session, task_winners: list[Measurement]
) -> dict[int, dict[str, Any]]:
    """{task winner id: the stored best config it did not replace}, for winners whose key's
    best config kept another variant (tuner.winner: not beaten with confidence)."""
    kept: dict[int, dict[str, Any]] = {}
    for m in task_winners:
        row = session.execute(
            select(Measurement, Variant)
            .join(BestConfig, BestConfig.measurement_id == Measurement.id)
            .join(Variant, Variant.id == Measurement.variant_id)
            .where(*same_best_key(BestConfig, m))
        ).first()
        if row is not None and row[0].variant_id != m.variant_id:
            kept[m.id] = winner_dict(row[0], row[1])
    return kept


def count_by(session: Session, column: Any) -> dict[str, int]:
    return {key: n for key, n in session.execute(select(column, func.count()).group_by(column))}
