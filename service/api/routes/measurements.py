"""``/v1/measurements``: every candidate measured for a job or a problem, fastest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy import select

from service.api.deps import DeviceQuery, SessionDep, require_read
from service.errors import InvalidInput
from service.schemas.common import BackendName, DType, Op, SafeStr
from service.schemas.configs import MeasurementList
from service.schemas.worker import Outcome
from service.store.lookup import find_devices
from service.store.measurements import measurement_out
from service.store.models import Device, Measurement, Toolchain, Variant
from service.store.validation import check_layout, parse_problem, query_dims, usable_id

__all__ = ["router"]

router = APIRouter(prefix="/v1/measurements", tags=["measurements"])

_KNOWN_QUERY = {"job_id", "op", "dtype", "layout", "device", "backend", "outcome", "limit"}


@router.get("", response_model=MeasurementList, dependencies=[Depends(require_read)])
def list_measurements(
    request: Request,
    session: SessionDep,
    job_id: Annotated[SafeStr | None, Query(max_length=64)] = None,
    op: Op | None = None,
    dtype: DType | None = None,
    layout: Annotated[SafeStr | None, Query(max_length=16)] = None,
    device: DeviceQuery = None,
    backend: BackendName | None = None,
    outcome: Outcome | None = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> MeasurementList:
    """By ``job_id``, or by ``op`` + ``dtype`` (+ ``layout``, ``device``) + the problem dims.
    Every outcome is listed; timed ones first by median."""
    query = (
        select(Measurement, Variant, Device, Toolchain)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Device, Device.id == Measurement.device_id)
        .join(Toolchain, Toolchain.id == Measurement.toolchain_id)
    )
    if job_id is not None:
        if not usable_id(job_id):
            raise InvalidInput(["query", "job_id"], "not a job id")
        query = query.where(Measurement.job_id == job_id)
    elif op is None or dtype is None:
        raise InvalidInput(["query", "job_id"], "give job_id, or op and dtype with the dims")
    if op is not None:
        query = query.where(Measurement.op == op)
        if dtype is None:
            raise InvalidInput(["query", "dtype"], "required with op")
        query = query.where(
            Measurement.dtype == dtype,
            Measurement.layout == check_layout(op, layout, ["query", "layout"]),
        )
        dims = query_dims(request.query_params, _KNOWN_QUERY)
        if dims or job_id is None:
            problem = parse_problem(op, dims, ["query"], dtype)
            query = query.where(Measurement.problem_key == problem.key())
    if device is not None or backend is not None:
        ids = [d.id for d in find_devices(session, device, backend)]
        query = query.where(Measurement.device_id.in_(ids))
    if outcome is not None:
        query = query.where(Measurement.outcome == outcome)
    rows = session.execute(query.order_by(Measurement.id).limit(limit)).all()
    items = [measurement_out(m, v, d, t) for m, v, d, t in rows]
    items.sort(key=lambda item: (item.median_us is None, item.median_us or 0.0, item.id))
    return MeasurementList(measurements=items)
