"""``/v1/jobs``: submit, list, show and cancel tuning jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, status
from sqlalchemy import select

from service.api.deps import SessionDep, SettingsDep, require_read, require_scope
from service.errors import InvalidInput, NotFound
from service.schemas.common import JobStatus, Op
from service.schemas.jobs import JobCreate, JobList, JobOut
from service.settings import Settings
from service.store.jobs import job_out, job_summary, parse_problems
from service.store.jobs import submit_job as submit
from service.store.models import ApiToken, Job
from service.store.queue import cancel_job, live_worker_devices, worker_live_seconds
from service.store.tokens import check_job_owner
from service.store.validation import check_backend, check_dtype, usable_id
from tuner.capabilities import capabilities_of

__all__ = ["router"]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def _live_seconds(settings: Settings) -> float:
    return worker_live_seconds(settings.lease_seconds)


#: a submit-scope token (or admin): the owner of the jobs it submits
SubmitToken = Annotated[ApiToken, Depends(require_scope("submit"))]


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def submit_job(
    body: JobCreate, session: SessionDep, settings: SettingsDep, token: SubmitToken
) -> JobOut:
    """Queue a tuning job: one task per problem. Nothing is stored when any field is bad.
    The token that submits the job owns it: only it (or an admin) may cancel it."""
    check_dtype(body.op, body.dtype, ["body", "dtype"])
    problems = parse_problems(body)
    check_backend(body.op, body.device.backend, ["body", "device", "backend"])
    if body.objective == "energy" and not capabilities_of(body.device.backend).measures_energy:
        raise InvalidInput(
            ["body", "objective"],
            f"the {body.device.backend} backend has no energy counter; use objective 'time'",
        )
    return submit(
        session,
        body,
        problems,
        token,
        confirm=settings.confirm,
        live_seconds=_live_seconds(settings),
    )


@router.get("", response_model=JobList, dependencies=[Depends(require_read)])
def list_jobs(
    session: SessionDep,
    settings: SettingsDep,
    status: JobStatus | None = None,
    op: Op | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JobList:
    query = select(Job).order_by(Job.created_at.desc(), Job.id).limit(limit)
    if status is not None:
        query = query.where(Job.status == status)
    if op is not None:
        query = query.where(Job.op == op)
    live = live_worker_devices(session, _live_seconds(settings))
    return JobList(jobs=[job_summary(session, job, live) for job in session.scalars(query)])


def _job(session: SessionDep, job_id: str) -> Job:
    job = session.get(Job, job_id) if usable_id(job_id) else None
    if job is None:
        raise NotFound(f"job {job_id!r} not found")
    return job


@router.get("/{job_id}", response_model=JobOut, dependencies=[Depends(require_read)])
def get_job(job_id: str, session: SessionDep, settings: SettingsDep) -> JobOut:
    """The job, its progress and per-problem winners; ``waiting_for`` says when no connected
    worker has a device the job asks for."""
    live = live_worker_devices(session, _live_seconds(settings))
    return job_out(session, _job(session, job_id), live)


@router.delete(
    "/{job_id}",
    response_model=JobOut,
    responses={403: {"description": "the job was submitted with another token"}},
)
def delete_job(job_id: str, session: SessionDep, token: SubmitToken) -> JobOut:
    """Cancel the job: unfinished tasks become cancelled; a finished job is left as it is.
    Only the token that submitted the job, or an admin token, may cancel it (403)."""
    job = _job(session, job_id)
    check_job_owner(job, token)
    cancel_job(session, job)
    session.commit()
    return job_out(session, job)
