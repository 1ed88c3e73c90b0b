"""The engine's values as the API's models (and back): the only conversion the agent needs.

The agent builds the same pydantic models the routes read (:mod:`service.schemas`), so what
it sends is validated before it leaves the host; the fields of a device, a toolchain or a
measurement are named once, by those models.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from service.schemas.artifacts import VariantBuildIn
from service.schemas.common import MAX_LOG_CHARS, DeviceIn
from service.schemas.measurement import MEASURED_FIELDS
from service.schemas.worker import HostIdentity, LeaseTask, MeasurementIn, ToolchainReport
from tuner.host import HostInfo
from tuner.problems import problem_from_dict
from tuner.types import (
    BenchResult,
    Budget,
    BuildRecord,
    DeviceInfo,
    Timing,
    Toolchain,
    TuneRequest,
)

__all__ = [
    "device_in",
    "host_in",
    "toolchain_report",
    "measured_values",
    "measurement_in",
    "request_from_task",
    "build_in",
]


def device_in(device: DeviceInfo) -> DeviceIn:
    """The engine's device as the API's: every field the model names, read off the dataclass."""
    fields = dataclasses.asdict(device)
    return DeviceIn.model_validate({name: fields[name] for name in DeviceIn.model_fields})


def host_in(host: HostInfo) -> HostIdentity:
    """The engine's host identity as the registration's."""
    return HostIdentity(fingerprint=host.fingerprint, device_uids=list(host.device_uids))


def toolchain_report(toolchain: Toolchain) -> ToolchainReport:
    return ToolchainReport(
        compiler=toolchain.compiler,
        template_version=toolchain.template_version,
        libraries=dict(toolchain.libraries),
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity (the API refuses them): turn them into None, deeply."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _positive(value: float | None) -> float | None:
    """Times must be > 0 for the API; a 0 from a coarse clock becomes None."""
    value = _finite(value)
    return value if value is None or value > 0 else None


def measured_values(result: BenchResult) -> dict[str, Any]:
    """The measured values (:data:`~service.schemas.measurement.MEASURED_FIELDS`) read off the
    result and its timing by name (no timing: no times); times must be > 0, others finite."""
    source = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    for f in dataclasses.fields(Timing):
        source[f.name] = getattr(result.timing, f.name) if result.timing else None
    return {
        name: _positive(source[name]) if name.endswith("_us") else _finite(source[name])
        for name in MEASURED_FIELDS
    }


def measurement_in(result: BenchResult) -> MeasurementIn:
    measured = measured_values(result)
    outcome = result.outcome.value
    if outcome == "ok" and measured["median_us"] is None:  # not from a sane backend: data
        outcome = "runtime_error"
    return MeasurementIn.model_validate(
        {
            **measured,
            "variant_id": result.variant_id,
            "variant_name": result.variant_name,
            "params": _finite(dict(result.params)),
            "outcome": outcome,
            "log": result.log[-MAX_LOG_CHARS:],
            "provenance": _finite(dict(result.provenance)),
            "suspect": bool(result.suspect),
        }
    )


def request_from_task(task: LeaseTask) -> TuneRequest:
    """The engine's request for a leased task; bad dims raise InvalidRequestError."""
    return TuneRequest(
        op=task.op,
        dtype=task.dtype,
        layout=task.layout,
        problem=problem_from_dict(task.op, dict(task.problem)),
        backend=task.device.backend,
        strategy=task.strategy,
        budget=Budget(max_variants=task.budget.max_variants, max_seconds=task.budget.max_seconds),
        objective=task.objective,
        seed=task.seed,
        incumbents=tuple(task.incumbents),
    )


def build_in(record: BuildRecord) -> VariantBuildIn:
    """A variant's build record as the upload's model (name and op are the service's own)."""
    fields = dataclasses.asdict(record)
    return VariantBuildIn.model_validate(
        {name: fields[name] for name in VariantBuildIn.model_fields}
    )
