"""``/v1/workers``: a worker registers itself and its devices; an admin lists them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, status
from sqlalchemy import select

from service.api.deps import SessionDep, SettingsDep, require_scope
from service.schemas.devices import WorkerEntry, WorkerList
from service.schemas.worker import WorkerOut, WorkerRegister
from service.store.device_map import check_devices
from service.store.keys import device_out, device_row
from service.store.models import ApiToken, Device, Worker, WorkerDevice

__all__ = ["router"]

router = APIRouter(prefix="/v1/workers", tags=["workers"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=WorkerOut,
    responses={403: {"description": "the token is not mapped to one of these devices"}},
)
def register_worker(
    body: WorkerRegister,
    session: SessionDep,
    settings: SettingsDep,
    token: Annotated[ApiToken, Depends(require_scope("worker"))],
) -> WorkerOut:
    """Register a worker and its devices. The worker is bound to this token: only it may
    lease, heartbeat and upload for the worker. Its host identity (``host``) decides whether
    its measurements can confirm another worker's winner (service.store.confirm). A token an
    admin mapped to devices registers only those (403; service.store.device_map)."""
    host = body.host
    check_devices(
        session,
        token,
        body.devices,
        host.device_uids if host else [],
        required=settings.device_map_required,
    )
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
    return WorkerOut(
        id=worker.id,
        name=worker.name,
        devices=[device_out(d) for d in devices],
        host_fingerprint=worker.host_fingerprint,
    )


@router.get("", response_model=WorkerList, dependencies=[Depends(require_scope("admin"))])
def list_workers(session: SessionDep) -> WorkerList:
    """Every registered worker with its token's name, its devices and the host identity it
    sent (admin): the hashed device ids a device map can pin (``key@uid``)."""
    workers = list(session.scalars(select(Worker).order_by(Worker.created_at, Worker.id)))
    devices: dict[str, list[Device]] = {}
    for worker_id, device in session.execute(
        select(WorkerDevice.worker_id, Device).join(Device, Device.id == WorkerDevice.device_id)
    ):
        devices.setdefault(worker_id, []).append(device)
    names: dict[int, str] = {i: n for i, n in session.execute(select(ApiToken.id, ApiToken.name))}
    return WorkerList(
        workers=[
            WorkerEntry(
                id=w.id,
                name=w.name,
                token_name=names.get(w.token_id) if w.token_id is not None else None,
                host_fingerprint=w.host_fingerprint,
                device_uids=list(w.device_uids or []),
                devices=[device_out(d) for d in devices.get(w.id, [])],
                created_at=w.created_at,
                last_seen_at=w.last_seen_at,
            )
            for w in workers
        ]
    )
