"""Models of ``/v1/jobs``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field, Strict, ValidationInfo, field_validator, model_validator

from service.schemas.common import (
    INTEGRAL,
    BudgetIn,
    BudgetOut,
    DeviceSelector,
    DType,
    JsonDict,
    JsonInt,
    Objective,
    Op,
    RequestModel,
    ResponseModel,
    SafeStr,
    StrategyName,
)
from service.schemas.names import LAYOUTS

__all__ = [
    "MAX_PROBLEMS_PER_JOB",
    "JobCreate",
    "JobProgress",
    "WinnerSummary",
    "ProblemStatus",
    "JobOut",
    "JobSummary",
    "JobList",
]

MAX_PROBLEMS_PER_JOB = 256


class JobCreate(RequestModel):
    """Body of ``POST /v1/jobs``. Problems are checked against the op by the route."""

    op: Op
    dtype: DType
    layout: SafeStr | None = None
    #: each the dims of the op (the OpenAPI document says them per op: service.api.openapi)
    problems: list[JsonDict] = Field(min_length=1, max_length=MAX_PROBLEMS_PER_JOB)
    device: DeviceSelector
    strategy: StrategyName = "exhaustive"
    budget: BudgetIn = Field(default_factory=BudgetIn)
    objective: Objective = "time"
    seed: JsonInt = Field(default=0, ge=0, le=2**31 - 1)
    #: 2: each winner is served as confirmed only once another host (another machine and
    #: physical device, same device key) re-measured it within the tie band; None: the
    #: server's TUNEHUB_CONFIRM
    confirm: Annotated[int, Strict(), Field(ge=1, le=2), INTEGRAL] | None = None

    @field_validator("layout")
    @classmethod
    def _layout_of_op(cls, value: str | None, info: ValidationInfo) -> str | None:
        op = info.data.get("op")
        if value is not None and op in LAYOUTS and value not in LAYOUTS[op]:
            raise ValueError(f"layout {value!r} is not one of {LAYOUTS[op]} for op {op}")
        return value

    @model_validator(mode="after")
    def _default_layout(self) -> JobCreate:
        if self.layout is None:
            self.layout = LAYOUTS[self.op][0]
        return self


class JobProgress(ResponseModel):
    tasks_done: int
    tasks_total: int
    candidates_done: int
    candidates_total: int


class WinnerSummary(ResponseModel):
    variant_id: str = ""
    variant_name: str
    params: dict[str, Any]
    median_us: float | None
    throughput: float | None = None
    throughput_unit: str = ""
    #: the variants its task could not tell from the fastest (tuner.winner), the winner first
    tie_set: list[str] = []
    #: false when the task's budget left budgeted candidates unmeasured (``unmeasured``)
    complete: bool = True
    unmeasured: int = 0


class ProblemStatus(ResponseModel):
    task_id: str
    #: a re-measuring task (job confirm 2): the task whose winner it re-measures
    confirm_of: str | None = None
    problem: dict[str, Any]
    status: str
    winner: WinnerSummary | None = None
    #: the stored best config this task's winner did not replace: it was within the tie band
    kept_incumbent: WinnerSummary | None = None
    error: str | None = None


class JobSummary(ResponseModel):
    id: str
    status: str
    op: str
    dtype: str
    layout: str
    device: dict[str, Any]
    strategy: str
    budget: BudgetOut
    objective: str
    seed: int
    confirm: int = 1
    #: the name of the token that submitted the job (its owner: only that token or an admin
    #: may cancel it); None for a job stored before owners
    submitted_by: str | None = None
    created_at: datetime
    updated_at: datetime
    error: str | None = None
    total_tasks: int
    progress: JobProgress
    #: set while queued tasks wait for a device no connected worker has, e.g.
    #: "waiting for a worker with a cuda device named like 'H200'; connected workers have ..."
    waiting_for: str | None = None


class JobOut(JobSummary):
    problems: list[ProblemStatus]


class JobList(ResponseModel):
    jobs: list[JobSummary]
