"""``/v1/devices``: the devices workers registered, and the rates an admin records for them
(a measurement faster than they allow is refused: service.store.bounds)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from sqlalchemy import select

from service.api.deps import SessionDep, require_read, require_scope
from service.errors import NotFound
from service.schemas.common import MAX_ROW_ID
from service.schemas.devices import DeviceEntry, DeviceList, DeviceRatesIn, DeviceRatesOut
from service.store.bounds import rates_of
from service.store.keys import device_out
from service.store.models import Device

__all__ = ["router"]

router = APIRouter(prefix="/v1/devices", tags=["devices"])

DeviceId = Annotated[int, Path(ge=1, le=MAX_ROW_ID, description="a device's id (GET /v1/devices)")]


def _entry(device: Device) -> DeviceEntry:
    rates = rates_of(device.name, device.copy_gbps, device.peak_tflops)
    return DeviceEntry(
        id=device.id,
        device=device_out(device),
        rates=DeviceRatesOut(
            copy_gbps=rates.copy_gbps, peak_tflops=rates.peak_tflops, source=rates.source
        ),
        created_at=device.created_at,
    )


@router.get("", response_model=DeviceList, dependencies=[Depends(require_read)])
def list_devices(session: SessionDep) -> DeviceList:
    """Every device a worker registered, with the rates measurements are held to."""
    devices = session.scalars(select(Device).order_by(Device.id))
    return DeviceList(devices=[_entry(d) for d in devices])


@router.put(
    "/{device_id}/rates",
    response_model=DeviceEntry,
    dependencies=[Depends(require_scope("admin"))],
)
def set_rates(device_id: DeviceId, body: DeviceRatesIn, session: SessionDep) -> DeviceEntry:
    """Record the device's copy rate and peak rates (admin); none given: its product's
    defaults again. Measurements stored before are not re-checked."""
    device = session.get(Device, device_id)
    if device is None:
        raise NotFound(f"device {device_id} not found; GET /v1/devices lists them")
    device.copy_gbps = body.copy_gbps
    device.peak_tflops = {str(k): v for k, v in body.peak_tflops.items()} or None
    session.commit()
    return _entry(device)
