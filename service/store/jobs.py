"""Jobs: submitted (a ``Job`` row and one ``Task`` per problem) and answered as ``JobOut``.

    problems = parse_problems(body)                      # 422 naming the bad dim, nothing stored
    answer = submit_job(session, body, problems, token, confirm=settings.confirm)

The answers are the wire's models (:mod:`service.schemas.jobs`), built from the rows here, so a
route returns them as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.schemas.common import FINISHED_STATUSES, BudgetOut
from service.schemas.jobs import (
    JobCreate,
    JobOut,
    JobProgress,
    JobSummary,
    ProblemStatus,
    WinnerSummary,
)
from service.store.keys import same_best_key
from service.store.models import ApiToken, BestConfig, Device, Job, Measurement, Task, Variant
from service.store.queue import live_worker_devices, waiting_for
from service.store.rows import columns
from service.store.validation import parse_problem
from tuner.problems import Problem

__all__ = ["parse_problems", "submit_job", "job_out", "job_summary", "winner_summary"]

log = logging.getLogger(__name__)


def parse_problems(body: JobCreate) -> list[Problem]:
    """The job's problems, parsed once here at the door (InvalidInput names the bad one)."""
    return [
        parse_problem(body.op, fields, ["body", "problems", index], body.dtype)
        for index, fields in enumerate(body.problems)
    ]


def submit_job(
    session: Session,
    body: JobCreate,
    problems: Sequence[Problem],
    owner: ApiToken,
    *,
    confirm: int,
    live_seconds: float,
) -> JobOut:
    """Store the job and one queued task per problem, owned by ``owner``; commits. ``confirm``:
    the server's TUNEHUB_CONFIRM, used when the body names none. The answer's ``waiting_for``
    looks at the workers seen in the last ``live_seconds``."""
    assert body.layout is not None  # JobCreate defaults it from the op
    job = Job(
        op=body.op,
        dtype=body.dtype,
        layout=body.layout,
        device=body.device.model_dump(exclude_none=True),
        backend=body.device.backend,
        strategy=body.strategy,
        budget=body.budget.model_dump(),
        objective=body.objective,
        seed=body.seed,
        confirm=body.confirm or confirm,
        token_id=owner.id,
    )
    session.add(job)
    session.flush()
    for position, problem in enumerate(problems):
        session.add(
            Task(
                job_id=job.id, position=position, problem=problem.dims(), problem_key=problem.key()
            )
        )
    session.commit()
    log.info("job %s: %s %s %s, %d problems", job.id, job.op, job.dtype, job.layout, len(problems))
    return job_out(session, job, live=live_worker_devices(session, live_seconds))


def _owner_name(session: Session, job: Job) -> str | None:
    """The name of the token that submitted the job (None: stored before owners)."""
    if job.token_id is None:
        return None
    token = session.get(ApiToken, job.token_id)
    return token.name if token is not None else None


def _tasks(session: Session, job: Job) -> list[Task]:
    return list(session.scalars(select(Task).where(Task.job_id == job.id).order_by(Task.position)))


def _summary(
    session: Session, job: Job, tasks: Sequence[Task], live: Sequence[Device] | None
) -> JobSummary:
    finished = sum(task.status in FINISHED_STATUSES for task in tasks)
    return JobSummary(
        **columns(job, "id", "status", "op", "dtype", "layout", "device", "strategy"),
        **columns(job, "objective", "seed", "confirm", "created_at", "updated_at", "error"),
        budget=BudgetOut.model_validate(job.budget),
        submitted_by=_owner_name(session, job),
        total_tasks=len(tasks),
        progress=JobProgress(
            tasks_done=finished,
            tasks_total=len(tasks),
            candidates_done=sum(task.progress_done for task in tasks),
            candidates_total=sum(task.progress_total for task in tasks),
        ),
        waiting_for=waiting_for(session, job, live) if live is not None else None,
    )


def job_summary(session: Session, job: Job, live: Sequence[Device] | None = None) -> JobSummary:
    """The job with its progress; ``waiting_for`` from the ``live`` devices when given
    (:func:`service.store.queue.live_worker_devices`)."""
    return _summary(session, job, _tasks(session, job), live)


def job_out(session: Session, job: Job, live: Sequence[Device] | None = None) -> JobOut:
    """:func:`job_summary` with each problem's status, winner and kept incumbent."""
    tasks = _tasks(session, job)
    summary = _summary(session, job, tasks, live)
    winner_ids = [task.winner_measurement_id for task in tasks if task.winner_measurement_id]
    winners: dict[int, tuple[Measurement, Variant]] = {}
    kept: dict[int, WinnerSummary] = {}
    if winner_ids:
        rows = session.execute(
            select(Measurement, Variant)
            .join(Variant, Variant.id == Measurement.variant_id)
            .where(Measurement.id.in_(winner_ids))
        ).all()
        winners = {m.id: (m, v) for m, v in rows}
        kept = _kept_incumbents(session, [m for m, _ in rows])
    problems = [
        ProblemStatus(
            task_id=task.id,
            confirm_of=task.confirm_of,
            problem=task.problem,
            status=task.status,
            winner=(
                winner_summary(*winners[task.winner_measurement_id], task)
                if task.winner_measurement_id in winners
                else None
            ),
            kept_incumbent=kept.get(task.winner_measurement_id or -1),
            error=task.error,
        )
        for task in tasks
    ]
    return JobOut(**dict(summary), problems=problems)


def winner_summary(
    measurement: Measurement, variant: Variant, task: Task | None = None
) -> WinnerSummary:
    """A winner; with the task that chose it, its tie set and completeness too."""
    summary = WinnerSummary(
        variant_id=variant.id,
        variant_name=variant.name,
        params=variant.params,
        **columns(measurement, "median_us", "throughput", "throughput_unit"),
    )
    if task is None:
        return summary
    return summary.model_copy(
        update={
            "tie_set": list(task.tie_set or [variant.name]),
            "complete": task.unmeasured == 0,
            "unmeasured": task.unmeasured,
        }
    )


def _kept_incumbents(session: Session, task_winners: list[Measurement]) -> dict[int, WinnerSummary]:
    """{task winner id: the stored best config it did not replace}, for winners whose key's
    best config kept another variant (tuner.winner: not beaten with confidence)."""
    kept: dict[int, WinnerSummary] = {}
    for m in task_winners:
        row = session.execute(
            select(Measurement, Variant)
            .join(BestConfig, BestConfig.measurement_id == Measurement.id)
            .join(Variant, Variant.id == Measurement.variant_id)
            .where(*same_best_key(BestConfig, m))
        ).first()
        if row is not None and row[0].variant_id != m.variant_id:
            kept[m.id] = winner_summary(row[0], row[1])
    return kept
