"""Models of ``/v1/configs``, ``/v1/measurements``, tokens and import/export."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from service.schemas.artifacts import ArtifactRef
from service.schemas.common import (
    BackendName,
    DeviceOut,
    DType,
    JsonDict,
    Op,
    RequestModel,
    ResponseModel,
    SafeStr,
    ToolchainOut,
)
from service.schemas.measurement import MeasuredValuesOut

__all__ = [
    "MAX_QUERIES",
    "MAX_NEAREST_DISTANCE",
    "BestConfigOut",
    "ConfigQuery",
    "ConfigQueryBatch",
    "ConfigQueryResult",
    "ConfigQueryResults",
    "MeasurementOut",
    "MeasurementList",
    "Scope",
    "TokenCreate",
    "TokenOut",
    "TokenInfo",
    "TokenList",
    "ImportSummary",
    "ImportRefusal",
]

MAX_QUERIES = 1024
#: the farthest nearest-shape answer `tunehub best` accepts unless --max-distance says more:
#: log2-space distance of the dims (``BestConfigOut.distance``), 2.0 = one dim 4x off, or
#: two dims each about 2.7x off; a config tuned that far away is more guess than answer
MAX_NEAREST_DISTANCE = 2.0
Scope = Literal["read", "submit", "worker", "admin"]


class BestConfigOut(ResponseModel):
    op: str
    dtype: str
    layout: str
    problem: dict[str, Any]
    #: the tuned problem that answered (differs from ``problem`` when exact is false)
    tuned_problem: dict[str, Any]
    exact: bool
    distance: float
    variant_id: str
    variant_name: str
    params: dict[str, Any]
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    throughput: float | None
    throughput_unit: str
    device: DeviceOut
    toolchain: ToolchainOut
    measured_at: datetime
    #: another host (another machine and physical device, same device key) re-measured the
    #: winner within the tie band (job ``confirm: 2``); false until then
    confirmed: bool = False
    #: the variants the deciding job could not tell from its fastest (tuner.winner: the
    #: confirmation rounds' confidence intervals), the winner first; any of them is as fast
    tie_set: list[str] = []
    #: false while the budget of every job of this key left budgeted candidates unmeasured
    #: (``unmeasured`` of them, in the most complete job); a later job that measures them
    #: all makes the answer complete
    complete: bool = True
    unmeasured: int = 0
    #: the objective this answer minimises
    objective: str = "time"
    energy_j: float | None = None
    #: the winner's built artifact for this answer's device arch and toolchain (a shared object
    #: exporting the tunehub C ABI), or None while no worker uploaded one
    artifact: ArtifactRef | None = None


class ConfigQuery(RequestModel):
    op: Op
    dtype: DType
    layout: SafeStr | None = Field(default=None, max_length=16)
    device: SafeStr | None = Field(default=None, max_length=300)
    backend: BackendName | None = None
    toolchain: SafeStr | None = Field(default=None, max_length=1000)
    problem: JsonDict


class ConfigQueryBatch(RequestModel):
    queries: list[ConfigQuery] = Field(min_length=1, max_length=MAX_QUERIES)


class ConfigQueryResult(ResponseModel):
    result: BestConfigOut | None = None
    error: str | None = None
    #: the ETag ``GET /v1/configs/best`` gives the same answer: a client caches it with the
    #: result, so its next lookup of the problem revalidates (304) instead of refetching
    etag: str | None = None


class ConfigQueryResults(ResponseModel):
    results: list[ConfigQueryResult]


class MeasurementOut(MeasuredValuesOut):
    """A stored measurement: its measured values (:mod:`service.schemas.measurement`), the
    key it was measured under, and what the run said."""

    id: int
    job_id: str | None
    task_id: str | None
    op: str
    dtype: str
    layout: str
    problem: dict[str, Any]
    variant_id: str
    variant_name: str
    params: dict[str, Any]
    outcome: str
    log: str
    provenance: dict[str, Any]
    suspect: bool
    device: DeviceOut
    toolchain: ToolchainOut
    created_at: datetime


class MeasurementList(ResponseModel):
    measurements: list[MeasurementOut]


class TokenCreate(RequestModel):
    name: SafeStr = Field(min_length=1, max_length=200)
    scopes: list[Scope] = Field(min_length=1, max_length=4)


class TokenOut(ResponseModel):
    id: int
    name: str
    scopes: list[str]
    #: the plaintext, shown once
    token: str


class TokenInfo(ResponseModel):
    """A token as an admin sees it: never its plaintext or hash."""

    id: int
    name: str
    scopes: list[str]
    revoked: bool
    #: the devices a worker token may serve (``key`` or ``key@uid``); empty: no map
    devices: list[str] = []
    created_at: datetime


class TokenList(ResponseModel):
    tokens: list[TokenInfo]


class ImportRefusal(ResponseModel):
    """A line an import refused: its number, the field and the reason."""

    line: int
    loc: list[str | int]
    msg: str


class ImportSummary(ResponseModel):
    """What ``POST /v1/import`` did with each non-blank line: ``inserted`` (a new key),
    ``replaced`` (faster with confidence than the stored winner), ``kept`` (stored as history,
    the stored winner stays), ``duplicates`` (stored already: nothing added) or ``refused``
    (listed in ``errors``, the first 100)."""

    records: int
    inserted: int
    replaced: int
    kept: int
    #: beat the stored winner by more than TUNEHUB_RECORD_MARGIN, unconfirmed: held, not served
    held: int = 0
    duplicates: int = 0
    refused: int = 0
    errors: list[ImportRefusal] = []
