"""``/v1/workers``: a worker registers itself and its devices."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, status

from service.api.deps import SessionDep, require_scope
from service.schemas.worker import WorkerOut, WorkerRegister
from service.store.keys import device_row
from service.store.models import ApiToken, Device, Worker, WorkerDevice
from service.store.views import device_dict

__all__ = ["router"]

router = APIRouter(prefix="/v1/workers", tags=["workers"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=WorkerOut,
)
def register_worker(
    body: WorkerRegister,
    session: SessionDep,
    token: Annotated[ApiToken, Depends(require_scope("worker"))],
) -> dict[str, Any]:
    """Register a worker and its devices. The worker is bound to this token: only it may
    lease, heartbeat and upload for the worker. Its host identity (``host``) decides whether
    its measurements can confirm another worker's winner (service.store.confirm)."""
    host = body.host
    worker = Worker(
        name=body.name,
        token_id=token.id,
        host_fingerprint=host.fingerprint if host else None,
        device_uids=sorted(set(host.device_uids)) if host else None,
    )
    session.add(worker)
    session.flush()
    devices: list[Device] = []
    for item in body.devices:
        device = device_row(session, **item.model_dump())
        if device.id not in {d.id for d in devices}:
            devices.append(device)
            session.add(WorkerDevice(worker_id=worker.id, device_id=device.id))
    session.commit()
    return {
        "id": worker.id,
        "name": worker.name,
        "devices": [device_dict(d) for d in devices],
        "host_fingerprint": worker.host_fingerprint,
    }
