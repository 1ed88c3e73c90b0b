"""``/v1/jobs``: submit, list, show and cancel tuning jobs."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, status
from sqlalchemy import select

from service.api.deps import SessionDep, require_read, require_scope
from service.errors import InvalidInput, NotFound
from service.schemas.common import JobStatus, Op
from service.schemas.jobs import JobCreate, JobList, JobOut
from service.store.models import Job, Task
from service.store.queue import cancel_job
from service.store.validation import parse_problem, usable_id
from service.store.views import job_dict
from tuner.registry import measures_energy

__all__ = ["router"]

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    dependencies=[Depends(require_scope("submit"))],
)
def submit_job(body: JobCreate, session: SessionDep) -> dict[str, Any]:
    """Queue a tuning job: one task per problem. Nothing is stored when any field is bad."""
    problems = [
        parse_problem(body.op, fields, ["body", "problems", index])
        for index, fields in enumerate(body.problems)
    ]
    if body.objective == "energy" and not measures_energy(body.device.backend):
        raise InvalidInput(
            ["body", "objective"],
            f"the {body.device.backend} backend has no energy counter; use objective 'time'",
        )
    assert body.layout is not None
    selector = body.device.model_dump(exclude_none=True)
    job = Job(
        op=body.op,
        dtype=body.dtype,
        layout=body.layout,
        device=selector,
        backend=body.device.backend,
        strategy=body.strategy,
        budget=body.budget.model_dump(),
        objective=body.objective,
        seed=body.seed,
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
    return job_dict(session, job, with_problems=True)


@router.get("", response_model=JobList, dependencies=[Depends(require_read)])
def list_jobs(
    session: SessionDep,
    status: JobStatus | None = None,
    op: Op | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    query = select(Job).order_by(Job.created_at.desc(), Job.id).limit(limit)
    if status is not None:
        query = query.where(Job.status == status)
    if op is not None:
        query = query.where(Job.op == op)
    return {"jobs": [job_dict(session, job, with_problems=False) for job in session.scalars(query)]}


def _job(session: SessionDep, job_id: str) -> Job:
    job = session.get(Job, job_id) if usable_id(job_id) else None
    if job is None:
        raise NotFound(f"job {job_id!r} not found")
    return job


@router.get("/{job_id}", response_model=JobOut, dependencies=[Depends(require_read)])
def get_job(job_id: str, session: SessionDep) -> dict[str, Any]:
    return job_dict(session, _job(session, job_id), with_problems=True)


@router.delete("/{job_id}", response_model=JobOut, dependencies=[Depends(require_scope("submit"))])
def delete_job(job_id: str, session: SessionDep) -> dict[str, Any]:
    """Cancel the job: unfinished tasks become cancelled; a finished job is left as it is."""
    job = _job(session, job_id)
    cancel_job(session, job)
    session.commit()
    return job_dict(session, job, with_problems=True)
