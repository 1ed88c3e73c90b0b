"""Worker-facing models: registration, leases, heartbeats and result uploads.

The routes, the client and the worker agent build and read these same models: one wire format.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from service.schemas.common import (
    COMPLETE_DEVICE_SCHEMA,
    COMPLETE_TOOLCHAIN_SCHEMA,
    MAX_BUDGET_VARIANTS,
    MAX_LOG_CHARS,
    BackendName,
    BudgetOut,
    DeviceIn,
    DeviceOut,
    DeviceReport,
    DeviceSelector,
    DType,
    JsonBool,
    JsonDict,
    JsonInt,
    Objective,
    Op,
    RequestModel,
    ResponseModel,
    SafeStr,
    StrategyName,
    ToolchainFields,
)
from service.schemas.jobs import WinnerSummary
from service.schemas.measurement import MeasuredValues, timing_order_error
from service.schemas.names import Outcome

__all__ = [
    "Outcome",
    "MAX_MEASUREMENTS_PER_UPLOAD",
    "MEDIAN_WHEN_OK",
    "timing_order_error",
    "HostIdentity",
    "WorkerRegister",
    "WorkerOut",
    "LeaseRequest",
    "LeaseTask",
    "LeaseOut",
    "HeartbeatIn",
    "HeartbeatOut",
    "ToolchainReport",
    "ToolchainIn",
    "MeasurementIn",
    "ResultsIn",
    "ResultsOut",
]

MAX_MEASUREMENTS_PER_UPLOAD = 10_000
#: JSON schema of "median_us is required when outcome is 'ok'"
MEDIAN_WHEN_OK: dict[str, Any] = {
    "if": {"properties": {"outcome": {"const": "ok"}}},
    "then": {"required": ["median_us"], "properties": {"median_us": {"type": "number"}}},
}


class HostIdentity(RequestModel):
    """Which machine and which physical devices a worker measures on (tuner.host): hashed,
    so no machine id or serial number leaves the host. A confirmation (job ``confirm: 2``)
    counts only from a worker of another host whose devices are not this one's."""

    #: sha256 hex of the machine id (/etc/machine-id or its stand-in)
    fingerprint: SafeStr = Field(min_length=16, max_length=64, pattern="^[0-9a-f]+$")
    #: hashed ids of the physical devices: GPU UUIDs (or host + PCI bus id); CPU: host + model
    device_uids: list[Annotated[SafeStr, Field(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=64
    )


class WorkerRegister(RequestModel):
    name: SafeStr = Field(min_length=1, max_length=200)
    devices: list[DeviceIn] = Field(min_length=1, max_length=64)
    #: the host identity; left out (an older agent), the worker's measurements never confirm
    host: HostIdentity | None = None


class WorkerOut(ResponseModel):
    id: str
    name: str
    devices: list[DeviceOut]
    host_fingerprint: str | None = None


class LeaseRequest(RequestModel):
    worker_id: SafeStr = Field(min_length=1, max_length=64)
    backends: list[BackendName] = Field(default=["cpu"], min_length=1, max_length=4)
    #: optional: lease only for this one of the worker's registered devices (a multi-GPU
    #: worker's slot asks for its own card); left out, any of the worker's devices matches
    device: DeviceIn | None = None


class LeaseTask(ResponseModel):
    """What the worker must tune: one problem of a job, with the job's settings."""

    task_id: str
    job_id: str
    op: Op
    dtype: DType
    layout: str
    #: the problem's dims (``tuner.problems.problem_from_dict`` reads them)
    problem: dict[str, Any]
    device: DeviceSelector
    strategy: StrategyName
    budget: BudgetOut
    objective: Objective
    seed: int
    #: the stored winners' variant names for this problem on the worker's device: the engine
    #: times them beside the candidates so a new winner is judged against them side by side
    incumbents: list[str] = []


class LeaseOut(ResponseModel):
    lease_id: str
    expires_at: datetime
    task: LeaseTask


class HeartbeatIn(RequestModel):
    done: JsonInt = Field(default=0, ge=0, le=10**9)
    total: JsonInt = Field(default=0, ge=0, le=10**9)


class HeartbeatOut(ResponseModel):
    expires_at: datetime
    cancelled: bool


class MeasurementIn(RequestModel, MeasuredValues):
    """One variant's result (a :class:`tuner.types.BenchResult` flattened): the measured
    values (:class:`~service.schemas.measurement.MeasuredValues`) and what the run said."""

    model_config = ConfigDict(json_schema_extra={**MEDIAN_WHEN_OK})

    variant_id: SafeStr = Field(min_length=1, max_length=64)
    variant_name: SafeStr = Field(min_length=1, max_length=300)
    params: JsonDict
    outcome: Outcome
    #: long logs are cut to their last MAX_LOG_CHARS characters, not refused
    log: SafeStr = ""
    provenance: JsonDict = Field(default_factory=dict)
    suspect: JsonBool = False
    #: a later timing of a variant this lease already uploaded (a suspect re-measured once
    #: quiet, or a near-tie confirmed side by side): it replaces that row's timing, adding no row
    retimed: JsonBool = False

    @model_validator(mode="after")
    def _ok_has_time(self) -> MeasurementIn:
        if self.outcome == "ok" and self.median_us is None:
            raise ValueError("median_us is required when outcome is 'ok'")
        if len(self.log) > MAX_LOG_CHARS:
            self.log = self.log[-MAX_LOG_CHARS:]
        return self


class ToolchainReport(ToolchainFields, RequestModel):
    """The toolchain in a result upload (complete whenever it carries measurements)."""


class ToolchainIn(ToolchainReport):
    """A complete toolchain (imported records): compiler and template version required."""

    compiler: SafeStr = Field(min_length=1, max_length=200)
    template_version: SafeStr = Field(min_length=1, max_length=100)


class ResultsIn(RequestModel):
    """Body of ``POST /v1/leases/{id}/results``. With measurements, device and toolchain
    must be complete; a bare failure report (final, error, no measurements) may leave them
    blank or out."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"required": ["measurements"], "properties": {"measurements": {"minItems": 1}}},
            "then": {
                "required": ["device", "toolchain"],
                "properties": {
                    "device": COMPLETE_DEVICE_SCHEMA,
                    "toolchain": COMPLETE_TOOLCHAIN_SCHEMA,
                },
            },
        }
    )

    device: DeviceReport | None = None
    toolchain: ToolchainReport | None = None
    measurements: list[MeasurementIn] = Field(
        default_factory=list, max_length=MAX_MEASUREMENTS_PER_UPLOAD
    )
    final: JsonBool = False
    error: SafeStr | None = Field(default=None, max_length=MAX_LOG_CHARS)
    #: with ``final``: budgeted candidates the task's budget left unmeasured (0: complete)
    unmeasured: JsonInt = Field(default=0, ge=0, le=MAX_BUDGET_VARIANTS)

    @model_validator(mode="after")
    def _complete_keys(self) -> ResultsIn:
        if not self.measurements:
            return self
        device, toolchain = self.device, self.toolchain
        if device is None or not device.is_complete():
            raise ValueError("device needs backend, name, arch and sm_count >= 1 with measurements")
        if toolchain is None or not toolchain.compiler or not toolchain.template_version:
            raise ValueError("toolchain needs compiler and template_version with measurements")
        return self


class ResultsOut(ResponseModel):
    #: measurements this upload stored (new rows, and re-timings applied)
    stored: int
    #: measurements the lease had stored already with the same content: a retried upload,
    #: which adds nothing (other content under a stored variant is a 409)
    replayed: int = 0
    #: measurements of variants an earlier lease of the task stored (its worker gone): the
    #: first measurement stays
    kept: int = 0
    #: after final: the task's fastest verified measurement (None before final or if none)
    winner: WinnerSummary | None = None
    task_status: str = "running"
