"""A stored measurement as the answers show it (``GET /v1/measurements``, the web UI)."""

from __future__ import annotations

from service.schemas.configs import MeasurementOut
from service.schemas.measurement import MEASURED_FIELDS
from service.store.keys import device_out, toolchain_out
from service.store.models import Device, Measurement, Toolchain, Variant

__all__ = ["measurement_out"]


def measurement_out(
    measurement: Measurement, variant: Variant, device: Device, toolchain: Toolchain
) -> MeasurementOut:
    return MeasurementOut(
        id=measurement.id,
        job_id=measurement.job_id,
        task_id=measurement.task_id,
        op=measurement.op,
        dtype=measurement.dtype,
        layout=measurement.layout,
        problem=measurement.problem,
        variant_id=variant.id,
        variant_name=variant.name,
        params=variant.params,
        outcome=measurement.outcome,
        **{name: getattr(measurement, name) for name in MEASURED_FIELDS},
        log=measurement.log,
        provenance=measurement.provenance,
        suspect=measurement.suspect,
        device=device_out(device),
        toolchain=toolchain_out(toolchain),
        created_at=measurement.created_at,
    )
