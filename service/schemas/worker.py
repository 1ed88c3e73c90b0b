"""Worker-facing models: registration, leases, heartbeats and result uploads.

The worker agent imports these to build its requests and parse the answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, StrictInt, model_validator

from service.schemas.common import (
    Backend,
    BudgetOut,
    DeviceOut,
    JsonDict,
    RequestModel,
    ResponseModel,
    SafeStr,
)
from service.schemas.jobs import WinnerSummary

__all__ = [
    "OUTCOMES",
    "Outcome",
    "MAX_MEASUREMENTS_PER_UPLOAD",
    "DeviceIn",
    "WorkerRegister",
    "WorkerOut",
    "LeaseRequest",
    "TaskDevice",
    "LeaseTask",
    "LeaseOut",
    "HeartbeatIn",
    "HeartbeatOut",
    "ToolchainIn",
    "DeviceReport",
    "ToolchainReport",
    "MeasurementIn",
    "ResultsIn",
    "ResultsOut",
]

#: the values of tuner.types.Outcome
OUTCOMES = (
    "ok", "compile_error", "runtime_error", "timeout", "wrong_result", "aborted_slow", "pruned",
)
Outcome = Literal[
    "ok", "compile_error", "runtime_error", "timeout", "wrong_result", "aborted_slow", "pruned",
]
MAX_MEASUREMENTS_PER_UPLOAD = 10_000
_MAX_LOG_CHARS = 16_000


class DeviceIn(RequestModel):
    """A concrete device: the key (backend, name, arch, sm_count) and what is stored beside it."""

    backend: Backend
    name: SafeStr = Field(min_length=1, max_length=200)
    arch: SafeStr = Field(min_length=1, max_length=64)
    sm_count: StrictInt = Field(ge=1, le=1_000_000)
    driver: SafeStr = Field(default="", max_length=100)
    runtime: SafeStr = Field(default="", max_length=100)
    memory_bytes: StrictInt = Field(default=0, ge=0, le=2**62)


class WorkerRegister(RequestModel):
    name: SafeStr = Field(min_length=1, max_length=200)
    devices: list[DeviceIn] = Field(min_length=1, max_length=64)


class WorkerOut(ResponseModel):
    id: str
    name: str
    devices: list[DeviceOut]


class LeaseRequest(RequestModel):
    worker_id: SafeStr = Field(min_length=1, max_length=64)
    backends: list[Backend] = Field(default=["cpu"], min_length=1, max_length=4)


class TaskDevice(ResponseModel):
    backend: str
    name: str | None = None
    arch: str | None = None


class LeaseTask(ResponseModel):
    task_id: str
    job_id: str
    op: str
    dtype: str
    layout: str
    problem: dict[str, Any]
    device: TaskDevice
    strategy: str
    budget: BudgetOut
    objective: str
    seed: int


class LeaseOut(ResponseModel):
    lease_id: str
    expires_at: datetime
    task: LeaseTask


class HeartbeatIn(RequestModel):
    done: StrictInt = Field(default=0, ge=0, le=10**9)
    total: StrictInt = Field(default=0, ge=0, le=10**9)


class HeartbeatOut(ResponseModel):
    expires_at: datetime
    cancelled: bool


class ToolchainIn(RequestModel):
    compiler: SafeStr = Field(min_length=1, max_length=200)
    template_version: SafeStr = Field(min_length=1, max_length=100)
    libraries: dict[SafeStr, SafeStr] = Field(default_factory=dict, max_length=32)


class MeasurementIn(RequestModel):
    """One variant's result (a :class:`tuner.types.BenchResult` flattened)."""

    variant_id: SafeStr = Field(min_length=1, max_length=64)
    variant_name: SafeStr = Field(min_length=1, max_length=300)
    params: JsonDict
    outcome: Outcome
    median_us: float | None = Field(default=None, gt=0, le=1e12)
    p20_us: float | None = Field(default=None, gt=0, le=1e12)
    p80_us: float | None = Field(default=None, gt=0, le=1e12)
    min_us: float | None = Field(default=None, gt=0, le=1e12)
    reps: StrictInt | None = Field(default=None, ge=0, le=2**62)
    throughput: float | None = Field(default=None, ge=0, le=1e15)
    throughput_unit: SafeStr = Field(default="", max_length=32)
    compile_seconds: float | None = Field(default=None, ge=0, le=1e7)
    #: long logs are cut to their last 16000 characters, not refused
    log: SafeStr = ""
    provenance: JsonDict = Field(default_factory=dict)
    suspect: bool = False

    @model_validator(mode="after")
    def _ok_has_time(self) -> MeasurementIn:
        if self.outcome == "ok" and self.median_us is None:
            raise ValueError("median_us is required when outcome is 'ok'")
        if len(self.log) > _MAX_LOG_CHARS:
            self.log = self.log[-_MAX_LOG_CHARS:]
        return self


class DeviceReport(RequestModel):
    """The measured device in a result upload; may be blank in a failure report without
    measurements (the worker could not even open its device)."""

    backend: Backend
    name: SafeStr = Field(default="", max_length=200)
    arch: SafeStr = Field(default="", max_length=64)
    sm_count: StrictInt = Field(default=0, ge=0, le=1_000_000)
    driver: SafeStr = Field(default="", max_length=100)
    runtime: SafeStr = Field(default="", max_length=100)
    memory_bytes: StrictInt = Field(default=0, ge=0, le=2**62)


class ToolchainReport(RequestModel):
    compiler: SafeStr = Field(default="", max_length=200)
    template_version: SafeStr = Field(default="", max_length=100)
    libraries: dict[SafeStr, SafeStr] = Field(default_factory=dict, max_length=32)


class ResultsIn(RequestModel):
    """Body of ``POST /v1/leases/{id}/results``. With measurements, device and toolchain
    must be complete; a bare failure report (final, error, no measurements) may leave them
    blank or out."""

    device: DeviceReport | None = None
    toolchain: ToolchainReport | None = None
    measurements: list[MeasurementIn] = Field(
        default_factory=list, max_length=MAX_MEASUREMENTS_PER_UPLOAD
    )
    final: bool = False
    error: SafeStr | None = Field(default=None, max_length=_MAX_LOG_CHARS)

    @model_validator(mode="after")
    def _complete_keys(self) -> ResultsIn:
        if not self.measurements:
            return self
        device, toolchain = self.device, self.toolchain
        if device is None or not device.name or not device.arch or device.sm_count < 1:
            raise ValueError("device needs backend, name, arch and sm_count >= 1 with measurements")
        if toolchain is None or not toolchain.compiler or not toolchain.template_version:
            raise ValueError("toolchain needs compiler and template_version with measurements")
        return self


class ResultsOut(ResponseModel):
    stored: int
    #: after final: the task's fastest verified measurement (None before final or if none)
    winner: WinnerSummary | None = None
    task_status: str = "running"
