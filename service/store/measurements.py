"""A stored measurement as the answers show it (``GET /v1/measurements``, the web UI), and the
best configs joined to what such an answer reads."""

from __future__ import annotations

from sqlalchemy import Select, select

from service.schemas.configs import MeasurementOut
from service.schemas.measurement import MEASURED_FIELDS
from service.store.keys import device_out, toolchain_out
from service.store.models import BestConfig, Device, Measurement, Toolchain, Variant
from service.store.rows import columns

__all__ = ["measurement_out", "joined_best"]


def measurement_out(
    measurement: Measurement, variant: Variant, device: Device, toolchain: Toolchain
) -> MeasurementOut:
    return MeasurementOut(
        **columns(measurement, "id", "job_id", "task_id", "op", "dtype", "layout", "problem"),
        variant_id=variant.id,
        variant_name=variant.name,
        params=variant.params,
        **columns(measurement, "outcome", *MEASURED_FIELDS, "log", "provenance", "suspect"),
        **columns(measurement, "created_at"),
        device=device_out(device),
        toolchain=toolchain_out(toolchain),
    )


def joined_best() -> Select[BestConfig, Measurement, Variant, Device, Toolchain]:
    """Each best config with its winning measurement, variant, device and toolchain."""
    return (
        select(BestConfig, Measurement, Variant, Device, Toolchain)
        .join(Measurement, Measurement.id == BestConfig.measurement_id)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Device, Device.id == BestConfig.device_id)
        .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
    )
