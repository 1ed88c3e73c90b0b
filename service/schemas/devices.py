"""Models of what an admin records about devices and worker tokens: a device's copy and peak
rates (no measurement may beat them), the devices a worker token may serve, and the workers
that registered (with the host identity they sent)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field

from service.schemas.common import DeviceOut, DType, RequestModel, ResponseModel, SafeStr

__all__ = [
    "MAX_RATE",
    "DeviceRatesIn",
    "DeviceRatesOut",
    "DeviceEntry",
    "DeviceList",
    "TokenDevicesIn",
    "TokenDevicesOut",
    "WorkerEntry",
    "WorkerList",
]

#: no device moves more than this many GB/s or computes more than this many TFLOP/s
MAX_RATE = 1e6
_Rate = Annotated[float, Field(gt=0, le=MAX_RATE)]


class DeviceRatesIn(RequestModel):
    """``PUT /v1/devices/{id}/rates``: the copy rate a copy kernel reached on the device (GB/s,
    read + written) and its peak TFLOP/s by dtype (the data sheet's dense figures); both
    left out: the product's defaults again."""

    copy_gbps: _Rate | None = None
    peak_tflops: dict[DType, _Rate] = Field(default_factory=dict)


class DeviceRatesOut(ResponseModel):
    copy_gbps: float | None = None
    peak_tflops: dict[str, float] = {}
    #: "recorded" (by an admin), "product" (service.store.bounds' defaults) or "none"
    source: str = "none"


class DeviceEntry(ResponseModel):
    id: int
    device: DeviceOut
    rates: DeviceRatesOut
    created_at: datetime


class DeviceList(ResponseModel):
    devices: list[DeviceEntry]


#: ``backend:name:arch:sm_count``, optionally ``@uid`` (a hashed physical device id)
DeviceMapEntry = Annotated[SafeStr, Field(min_length=7, max_length=500)]


class TokenDevicesIn(RequestModel):
    """``PUT /v1/tokens/{id}/devices``: the devices the worker token may serve, replacing its
    map (an empty list: no map)."""

    devices: list[DeviceMapEntry] = Field(max_length=1024)


class TokenDevicesOut(ResponseModel):
    token_id: int
    devices: list[str]


class WorkerEntry(ResponseModel):
    """A registered worker as an admin sees it: what its host said it is."""

    id: str
    name: str
    token_name: str | None = None
    host_fingerprint: str | None = None
    device_uids: list[str] = []
    devices: list[DeviceOut]
    created_at: datetime
    last_seen_at: datetime


class WorkerList(ResponseModel):
    workers: list[WorkerEntry]
