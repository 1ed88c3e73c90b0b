"""Shared building blocks of the request and response models.

Requests forbid unknown fields (a typo is a 422, not a silent default); responses ignore
unknown fields so that an older client keeps working against a newer service.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
)

from service.schemas.names import BackendName, DType, Objective, Op, StrategyName
from service.schemas.text import TEXT_PATTERN, check_text

__all__ = [
    "RequestModel",
    "ResponseModel",
    "SafeStr",
    "JsonDict",
    "JsonInt",
    "JsonBool",
    "INTEGRAL",
    "ShortStr",
    "TEXT_PATTERN",
    "JSON_OBJECT_MARK",
    "COMPLETE_DEVICE_SCHEMA",
    "COMPLETE_TOOLCHAIN_SCHEMA",
    "Op",
    "DType",
    "BackendName",
    "StrategyName",
    "Objective",
    "JobStatus",
    "JOB_STATUSES",
    "FINISHED_STATUSES",
    "MAX_LOG_CHARS",
    "DeviceSelector",
    "BudgetIn",
    "BudgetOut",
    "DeviceFields",
    "DeviceReport",
    "DeviceIn",
    "DeviceOut",
    "ToolchainFields",
    "ToolchainOut",
    "HealthOut",
    "MAX_BUDGET_VARIANTS",
    "MAX_ROW_ID",
    "MAX_BUDGET_SECONDS",
    "MAX_JSON_BYTES",
]

MAX_BUDGET_VARIANTS = 100_000
#: integer row ids (measurements, tokens) are 32-bit on PostgreSQL: a larger one names nothing
#: (and must not reach a query, where it overflows the column's type)
MAX_ROW_ID = 2**31 - 1
MAX_BUDGET_SECONDS = 7 * 24 * 3600.0
#: provenance/params blobs larger than this are refused
MAX_JSON_BYTES = 64 * 1024

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)
#: a job or task in one of these states will not change any more
FINISHED_STATUSES = frozenset({"done", "failed", "cancelled"})
#: logs and error texts are kept up to this many characters (their ends: where errors are)
MAX_LOG_CHARS = 16_000


def _json_blob(value: dict[str, Any]) -> dict[str, Any]:
    def walk(item: Any) -> None:
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("must not contain NaN or infinity")
        if isinstance(item, str):
            check_text(item)
        elif isinstance(item, dict):
            for key, sub in item.items():
                check_text(str(key))
                walk(sub)
        elif isinstance(item, list):
            for sub in item:
                walk(sub)

    walk(value)
    if len(json.dumps(value)) > MAX_JSON_BYTES:
        raise ValueError(f"larger than {MAX_JSON_BYTES} bytes of JSON")
    return value


def _integral(value: Any) -> Any:
    # JSON has one number type: 134217729.0 is the integer 134217729 (JSON Schema agrees)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: marks a JsonDict in a JSON schema; service.api.openapi points it at a recursive schema
JSON_OBJECT_MARK = "x-tunehub-json-object"


class _TextSchema:
    """Says :data:`TEXT_PATTERN` in the JSON schema of every SafeStr, so the document is exact."""

    def __get_pydantic_json_schema__(self, core: Any, handler: Any) -> dict[str, Any]:
        schema: dict[str, Any] = handler(core)
        schema.setdefault("pattern", TEXT_PATTERN)
        return schema


class _JsonObjectSchema:
    def __get_pydantic_json_schema__(self, core: Any, handler: Any) -> dict[str, Any]:
        return {"type": "object", JSON_OBJECT_MARK: True}


SafeStr = Annotated[str, AfterValidator(check_text), _TextSchema()]
#: a short name (library names and versions)
ShortStr = Annotated[str, AfterValidator(check_text), Field(max_length=200)]
#: a JSON object of params or provenance: acceptable text (service.schemas.text) in every
#: string and key, finite numbers, bounded size
JsonDict = Annotated[dict[str, Any], AfterValidator(_json_blob), _JsonObjectSchema()]
#: turns an integer-valued JSON number into an int; goes last in an Annotated int, after
#: Field(ge, le), so that the bounds reach the JSON schema also inside ``| None``
INTEGRAL = BeforeValidator(_integral)
#: an integer: JSON integers and integer-valued numbers; never a string or a bool
JsonInt = Annotated[int, Strict(), INTEGRAL]
#: a boolean: JSON true or false; never 0, 1 or "yes"
JsonBool = Annotated[bool, Strict()]


def _string_map(schema: dict[str, Any], max_length: int) -> None:
    """A dict of SafeStr to SafeStr, said exactly (pydantic says it with patternProperties,
    which leaves other keys unconstrained)."""
    text = {"type": "string", "maxLength": max_length, "pattern": TEXT_PATTERN}
    schema.pop("patternProperties", None)
    schema["propertyNames"] = {"maxLength": max_length, "pattern": TEXT_PATTERN}
    schema["additionalProperties"] = text


#: a device whose key is complete (what an upload with measurements must name)
COMPLETE_DEVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "arch", "sm_count"],
    "properties": {
        "name": {"minLength": 1},
        "arch": {"minLength": 1},
        "sm_count": {"minimum": 1},
    },
}
#: a toolchain with its compiler and template version
COMPLETE_TOOLCHAIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["compiler", "template_version"],
    "properties": {"compiler": {"minLength": 1}, "template_version": {"minLength": 1}},
}


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ResponseModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DeviceSelector(RequestModel):
    """Which devices may run a job: backend equal, name a substring, arch equal."""

    backend: BackendName
    name: SafeStr | None = Field(default=None, min_length=1, max_length=200)
    arch: SafeStr | None = Field(default=None, min_length=1, max_length=64)


class BudgetIn(RequestModel):
    max_variants: Annotated[int, Strict(), Field(ge=1, le=MAX_BUDGET_VARIANTS), INTEGRAL] | None = (
        None
    )
    max_seconds: float | None = Field(default=None, gt=0, le=MAX_BUDGET_SECONDS)


class BudgetOut(ResponseModel):
    max_variants: int | None = None
    max_seconds: float | None = None


class DeviceFields(BaseModel):
    """A device's fields, defined once: the key (backend, name, arch, sm_count) and what is
    stored beside it. Blank key fields are allowed here (a failure report may not know its
    device); :class:`DeviceIn` requires them."""

    backend: BackendName
    name: SafeStr = Field(default="", max_length=200)
    arch: SafeStr = Field(default="", max_length=64)
    sm_count: JsonInt = Field(default=0, ge=0, le=1_000_000)
    driver: SafeStr = Field(default="", max_length=100)
    runtime: SafeStr = Field(default="", max_length=100)
    memory_bytes: JsonInt = Field(default=0, ge=0, le=2**53)

    def is_complete(self) -> bool:
        return bool(self.name and self.arch and self.sm_count >= 1)


class DeviceReport(DeviceFields, RequestModel):
    """The measured device in a result upload (complete whenever it carries measurements)."""


class DeviceIn(DeviceReport):
    """A concrete device a worker registers: name, arch and sm_count are required."""

    name: SafeStr = Field(min_length=1, max_length=200)
    arch: SafeStr = Field(min_length=1, max_length=64)
    sm_count: JsonInt = Field(ge=1, le=1_000_000)


class DeviceOut(DeviceFields, ResponseModel):
    # answers take what is stored as it is: the text rule is the door's (service.schemas.text)
    backend: str  # type: ignore[assignment]  # answers may name backends this client lacks
    name: str = ""
    arch: str = ""
    driver: str = ""
    runtime: str = ""
    key: str = ""


class ToolchainFields(BaseModel):
    """Compiler, template version and library versions: what makes results comparable."""

    compiler: SafeStr = Field(default="", max_length=200)
    template_version: SafeStr = Field(default="", max_length=100)
    libraries: dict[ShortStr, ShortStr] = Field(
        default_factory=dict,
        max_length=32,
        json_schema_extra=lambda schema: _string_map(schema, 200),
    )


class ToolchainOut(ToolchainFields, ResponseModel):
    compiler: str = ""
    template_version: str = ""
    libraries: dict[str, str] = Field(default_factory=dict)
    key: str = ""


class HealthOut(ResponseModel):
    """``GET /healthz``: ``status`` is "ok", or "error" (with HTTP 503) when the database
    does not answer; ``revision`` is the schema's Alembic revision."""

    status: str
    database: str
    revision: str | None = None
