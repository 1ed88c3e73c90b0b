"""``/v1/leases``: a worker leases a task, heartbeats, and uploads its results."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response, status

from service.api.deps import SessionDep, SettingsDep, require_scope
from service.api.openapi import described
from service.schemas.worker import (
    HeartbeatIn,
    HeartbeatOut,
    LeaseOut,
    LeaseRequest,
    ResultsIn,
    ResultsOut,
)
from service.store.device_map import check_devices
from service.store.models import ApiToken
from service.store.queue import claim_task, heartbeat, incumbent_names, lease_out
from service.store.results import store_results
from service.store.tokens import check_lease_owner, owned_worker

__all__ = ["router"]

router = APIRouter(prefix="/v1/leases", tags=["leases"])

#: a worker-scope token; it may act only for the workers it registered
WorkerToken = Annotated[ApiToken, Depends(require_scope("worker"))]


@router.post(
    "",
    response_model=LeaseOut,
    responses=described(
        {
            204: "no queued task matches this worker's devices",
            403: "the worker was registered with another token",
            404: "unknown worker id",
        }
    ),
)
def lease_task(
    body: LeaseRequest, session: SessionDep, settings: SettingsDep, token: WorkerToken
) -> LeaseOut | Response:
    worker = owned_worker(session, body.worker_id, token)
    claimed = claim_task(session, worker, body.backends, settings.lease_seconds, body.device)
    if claimed is None:
        session.commit()  # expired leases may have been requeued
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    lease, task, job = claimed
    incumbents = incumbent_names(session, worker, job, task, body.device)
    session.commit()
    return lease_out(lease, task, job, incumbents)


@router.post(
    "/{lease_id}/heartbeat",
    response_model=HeartbeatOut,
    responses=described(
        {
            403: "the lease belongs to a worker of another token",
            409: "the lease is no longer held",
        }
    ),
)
def lease_heartbeat(
    lease_id: str,
    body: HeartbeatIn,
    session: SessionDep,
    settings: SettingsDep,
    token: WorkerToken,
) -> HeartbeatOut:
    check_lease_owner(session, lease_id, token)
    expires_at, cancelled = heartbeat(
        session, lease_id, body.done, body.total, settings.lease_seconds
    )
    session.commit()
    return HeartbeatOut(expires_at=expires_at, cancelled=cancelled)


@router.post(
    "/{lease_id}/results",
    response_model=ResultsOut,
    responses=described(
        {
            403: "the lease belongs to a worker of another token, or the token "
            "is not mapped to the measured device",
            409: "the lease is no longer held, already final, or a retry differs",
        }
    ),
)
def lease_results(
    lease_id: str, body: ResultsIn, session: SessionDep, settings: SettingsDep, token: WorkerToken
) -> ResultsOut:
    """Store a batch of measurements; ``final`` ends the task and upserts the best config in
    the same transaction. A retried batch adds no rows and gets the same answer."""
    check_lease_owner(session, lease_id, token)
    if body.device is not None and body.measurements:
        check_devices(session, token, [body.device], None, required=settings.device_map_required)
    answer = store_results(
        session,
        lease_id,
        body,
        verify=settings.verify_variants,
        record_margin=settings.record_margin,
    )
    session.commit()
    return answer
