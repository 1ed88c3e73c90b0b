"""Task leasing: claim, heartbeat, expiry and cancellation.

A claim on PostgreSQL is ``SELECT ... FOR UPDATE SKIP LOCKED``; on SQLite a single guarded
``UPDATE tasks ... WHERE id = ? AND status = 'queued'`` whose rowcount says who won. An expired
lease goes back to the queue (``attempts`` + 1); the third expiry fails the task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from service.errors import Conflict, InvalidInput, NotFound
from service.schemas.common import (
    FINISHED_STATUSES,
    BudgetOut,
    DeviceFields,
    DeviceSelector,
    DType,
    Objective,
    Op,
    StrategyName,
)
from service.schemas.worker import LeaseOut, LeaseTask
from service.store.best import incumbents_of
from service.store.confirm import lease_clause
from service.store.keys import selector_matches
from service.store.models import (
    Device,
    Job,
    Lease,
    Task,
    Worker,
    WorkerDevice,
    new_id,
    utcnow,
)

__all__ = [
    "MAX_ATTEMPTS",
    "requeue_expired",
    "claim_task",
    "incumbent_names",
    "lease_out",
    "heartbeat",
    "held_task",
    "cancel_job",
    "refresh_job_status",
    "live_worker_devices",
    "waiting_for",
]

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
_CLAIM_TRIES = 32
#: live devices named in a ``waiting_for`` text, at most
_NAMED_DEVICES = 4


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def refresh_job_status(session: Session, job: Job) -> None:
    """Move the job to running/done/failed from its tasks (a cancelled job stays cancelled)."""
    if job.status == "cancelled":
        return
    statuses = list(session.scalars(select(Task.status).where(Task.job_id == job.id)))
    if statuses and all(status in FINISHED_STATUSES for status in statuses):
        if "done" in statuses:
            job.status = "done"
        else:
            job.status = "failed"
            job.error = job.error or "every task failed"
    elif any(status != "queued" for status in statuses):
        job.status = "running"


def worker_live_seconds(lease_seconds: int) -> float:
    """A worker unseen for a lease's length counts as gone (its lease would expire too); an
    idle worker polls every second or so, so a short lease setting does not hide it."""
    return float(max(lease_seconds, 10))


def live_worker_devices(session: Session, live_seconds: float) -> list[Device]:
    """Devices of the workers seen (registered, leasing or heartbeating) in the last
    ``live_seconds``: the ones that can take a queued task soon."""
    since = utcnow() - timedelta(seconds=live_seconds)
    # DISTINCT over ids only: PostgreSQL has no equality for the json columns of a device
    live = (
        select(WorkerDevice.device_id)
        .join(Worker, Worker.id == WorkerDevice.worker_id)
        .where(Worker.last_seen_at >= since)
    )
    return list(session.scalars(select(Device).where(Device.id.in_(live)).order_by(Device.id)))


def _wanted(selector: dict[str, Any]) -> str:
    text = f"a {selector.get('backend')} device"
    if selector.get("name"):
        text += f" named like {selector['name']!r}"
    if selector.get("arch"):
        text += f" of arch {selector['arch']}"
    return text


def waiting_for(session: Session, job: Job, live: Sequence[Device]) -> str | None:
    """Why a job's queued tasks sit still: no live worker has a device its selector matches,
    or only re-measuring tasks are left, which wait for another host (service.store.confirm).

    None when the job is finished, has nothing queued, or some live worker can take it."""
    if job.status not in ("queued", "running"):
        return None
    if any(selector_matches(job.device, d.backend, d.name, d.arch) for d in live):
        queued = list(
            session.scalars(
                select(Task.confirm_of).where(Task.job_id == job.id, Task.status == "queued")
            )
        )
        if queued and all(task is not None for task in queued):
            return (
                "waiting for another host (another machine and physical device with the same "
                "device key) to re-measure each winner (confirm 2) or held record "
                "(TUNEHUB_RECORD_MARGIN); the measuring host's own workers cannot confirm it"
            )
        return None
    if not session.scalar(select(exists().where(Task.job_id == job.id, Task.status == "queued"))):
        return None
    if not live:
        return f"waiting for a worker with {_wanted(job.device)}; no worker is connected"
    named = ", ".join(d.key() for d in live[:_NAMED_DEVICES])
    more = f" and {len(live) - _NAMED_DEVICES} more" if len(live) > _NAMED_DEVICES else ""
    return f"waiting for a worker with {_wanted(job.device)}; connected workers have {named}{more}"


def requeue_expired(session: Session, now: datetime | None = None) -> int:
    """Return expired leases to the queue, or fail their tasks after MAX_ATTEMPTS; the count."""
    now = now or utcnow()
    expired = session.execute(
        select(Task.id, Task.lease_id, Task.attempts, Task.job_id).where(
            Task.status == "running", Task.lease_expires_at < now
        )
    ).all()
    moved = 0
    for task_id, lease_id, attempts, job_id in expired:
        failed = attempts + 1 >= MAX_ATTEMPTS
        values = {
            "attempts": attempts + 1,
            "status": "failed" if failed else "queued",
            "lease_id": lease_id if failed else None,
            "lease_owner": None,
            "lease_expires_at": None,
            "error": f"lease expired {attempts + 1} times (worker lost?)" if failed else None,
        }
        result = session.execute(
            update(Task)
            .where(Task.id == task_id, Task.status == "running", Task.lease_id == lease_id)
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            moved += 1
            log.info("task %s: lease %s expired (%s)", task_id, lease_id, values["status"])
            if failed:
                job = session.get(Job, job_id)
                if job is not None:
                    refresh_job_status(session, job)
    return moved


def _worker_devices(
    session: Session, worker: Worker, device: DeviceFields | None = None
) -> list[Device]:
    """The worker's registered devices; only ``device``'s key among them when given."""
    devices = list(
        session.scalars(
            select(Device)
            .join(WorkerDevice, WorkerDevice.device_id == Device.id)
            .where(WorkerDevice.worker_id == worker.id)
        )
    )
    if device is not None:  # a slot of a multi-GPU worker leases for its own card
        key = (device.backend, device.name, device.arch, device.sm_count)
        devices = [d for d in devices if (d.backend, d.name, d.arch, d.sm_count) == key]
        if not devices:
            raise InvalidInput(["body", "device"], "not one of this worker's registered devices")
    return devices


def _matching_jobs(
    session: Session, worker: Worker, backends: Sequence[str], device: DeviceFields | None = None
) -> list[str]:
    devices = _worker_devices(session, worker, device)
    has_queued = exists().where(Task.job_id == Job.id, Task.status == "queued")
    jobs = session.execute(
        select(Job.id, Job.device)
        .where(Job.status.in_(("queued", "running")), Job.backend.in_(list(backends)), has_queued)
        .order_by(Job.created_at, Job.id)
    ).all()
    return [
        job_id
        for job_id, selector in jobs
        if any(selector_matches(selector, d.backend, d.name, d.arch) for d in devices)
    ]


def claim_task(
    session: Session,
    worker: Worker,
    backends: Sequence[str],
    lease_seconds: int,
    device: DeviceFields | None = None,
) -> tuple[Lease, Task, Job] | None:
    """Lease the oldest queued task this worker's devices (only ``device``'s key among them,
    when given) can run, or None. Commits nothing."""
    now = utcnow()
    worker.last_seen_at = now  # a polling worker is live even when nothing is queued for it
    requeue_expired(session, now)
    job_ids = _matching_jobs(session, worker, backends, device)
    if not job_ids:
        return None
    expires = now + timedelta(seconds=lease_seconds)
    lease = Lease(id=new_id(), task_id="", worker_id=worker.id, created_at=now)
    claimed: Task | None = None
    candidates = (
        select(Task)
        .join(Job, Job.id == Task.job_id)
        .where(
            Task.job_id.in_(job_ids),
            Task.status == "queued",
            lease_clause(session, worker, device, job_ids),
        )
        .order_by(Job.created_at, Task.job_id, Task.position)
    )
    if _is_postgres(session):
        claimed = session.scalars(
            candidates.limit(1).with_for_update(skip_locked=True, of=Task)
        ).first()
        if claimed is not None:
            claimed.status, claimed.lease_id = "running", lease.id
            claimed.lease_owner, claimed.lease_expires_at = worker.id, expires
            claimed.progress_done = claimed.progress_total = 0
    else:
        for task_id in session.scalars(candidates.with_only_columns(Task.id).limit(_CLAIM_TRIES)):
            result = session.execute(
                update(Task)
                .where(Task.id == task_id, Task.status == "queued")
                .values(
                    status="running",
                    lease_id=lease.id,
                    lease_owner=worker.id,
                    lease_expires_at=expires,
                    progress_done=0,
                    progress_total=0,
                )
                .execution_options(synchronize_session=False)
            )
            if result.rowcount == 1:  # type: ignore[attr-defined]
                claimed = session.get(Task, task_id, populate_existing=True)
                break
    if claimed is None:
        return None
    lease.task_id = claimed.id
    session.add(lease)
    job = session.get(Job, claimed.job_id)
    assert job is not None
    if job.status == "queued":
        job.status = "running"
    session.flush()
    return lease, claimed, job


def incumbent_names(
    session: Session, worker: Worker, job: Job, task: Task, device: DeviceFields | None = None
) -> list[str]:
    """The variant names of the stored winners of the task's problem on the leasing worker's
    devices (of the job's backend): the engine times them beside its own candidates, so the
    store's rule compares a new winner with the incumbent side by side (tuner.winner)."""
    devices = _worker_devices(session, worker, device)
    return incumbents_of(session, job, task, [d.id for d in devices if d.backend == job.backend])


def lease_out(lease: Lease, task: Task, job: Job, incumbents: Sequence[str]) -> LeaseOut:
    """The answer of a claim: the lease and what the worker needs to tune its task."""
    assert task.lease_expires_at is not None  # claim_task sets it with the owner
    return LeaseOut(
        lease_id=lease.id,
        expires_at=task.lease_expires_at,
        task=LeaseTask(
            task_id=task.id,
            job_id=job.id,
            # the row holds the names JobCreate checked at submission
            op=cast(Op, job.op),
            dtype=cast(DType, job.dtype),
            layout=job.layout,
            problem=task.problem,
            device=DeviceSelector.model_validate(job.device),
            strategy=cast(StrategyName, job.strategy),
            budget=BudgetOut.model_validate(job.budget),
            objective=cast(Objective, job.objective),
            seed=job.seed,
            incumbents=list(incumbents),
        ),
    )


def _lease(session: Session, lease_id: str) -> Lease | None:
    if not lease_id or len(lease_id) > 64 or "\x00" in lease_id:
        return None
    return session.get(Lease, lease_id)


def _lease_and_task(session: Session, lease_id: str) -> tuple[Lease, Task]:
    """The lease and its task, held or not; 404 when either is unknown."""
    lease = _lease(session, lease_id)
    if lease is None:
        raise NotFound(f"lease {lease_id!r} not found")
    task = session.get(Task, lease.task_id)
    if task is None:
        raise NotFound(f"task of lease {lease_id!r} not found")
    return lease, task


def held_task(session: Session, lease_id: str) -> tuple[Lease, Task]:
    """The lease and its task; 404 for an unknown lease, 409 when the lease is no longer held."""
    lease, task = _lease_and_task(session, lease_id)
    if task.lease_id != lease.id:
        raise Conflict(f"lease {lease_id} is no longer held: the task was leased again")
    return lease, task


def heartbeat(
    session: Session, lease_id: str, done: int, total: int, lease_seconds: int
) -> tuple[datetime, bool]:
    """Extend a held lease; returns (expires_at, cancelled). Commits nothing."""
    now = utcnow()
    lease, task = _lease_and_task(session, lease_id)
    expires = now + timedelta(seconds=lease_seconds)
    if task.status == "queued" and task.lease_id is None:
        # expired and requeued, but nobody took it yet: the same worker may carry on
        latest = session.scalar(
            select(Lease.id).where(Lease.task_id == task.id).order_by(Lease.created_at.desc())
        )
        if latest == lease.id:
            result = session.execute(
                update(Task)
                .where(Task.id == task.id, Task.status == "queued", Task.lease_id.is_(None))
                .values(status="running", lease_id=lease.id, lease_owner=lease.worker_id)
                .execution_options(synchronize_session=False)
            )
            if result.rowcount == 1:  # type: ignore[attr-defined]
                session.refresh(task)
    if task.lease_id != lease.id:
        raise Conflict(f"lease {lease_id} is no longer held: the task was leased again")
    if task.status == "cancelled":
        return task.lease_expires_at or now, True
    if task.status != "running":
        raise Conflict(f"lease {lease_id} is finished: the task is {task.status}")
    task.lease_expires_at = expires
    task.progress_done, task.progress_total = min(done, max(total, done)), max(total, done)
    worker = session.get(Worker, lease.worker_id)
    if worker is not None:
        worker.last_seen_at = now
    session.flush()
    return expires, False


def cancel_job(session: Session, job: Job) -> None:
    """Cancel the job and its unfinished tasks; running leases learn it at their next heartbeat."""
    if job.status in FINISHED_STATUSES:
        return
    job.status = "cancelled"
    session.execute(
        update(Task)
        .where(Task.job_id == job.id, Task.status.in_(("queued", "running")))
        .values(status="cancelled", updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.flush()
