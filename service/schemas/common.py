"""Shared building blocks of the request and response models.

Requests forbid unknown fields (a typo is a 422, not a silent default); responses ignore
unknown fields so that an older client keeps working against a newer service.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt

__all__ = [
    "RequestModel",
    "ResponseModel",
    "SafeStr",
    "JsonDict",
    "Backend",
    "DeviceSelector",
    "BudgetIn",
    "BudgetOut",
    "DeviceOut",
    "ToolchainOut",
    "MAX_BUDGET_VARIANTS",
    "MAX_BUDGET_SECONDS",
    "MAX_JSON_BYTES",
]

MAX_BUDGET_VARIANTS = 100_000
MAX_BUDGET_SECONDS = 7 * 24 * 3600.0
#: provenance/params blobs larger than this are refused
MAX_JSON_BYTES = 64 * 1024

Backend = Literal["cpu", "cuda"]


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL; refuse it here rather than fail in the database
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


def _json_blob(value: dict[str, Any]) -> dict[str, Any]:
    def walk(item: Any) -> None:
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("must not contain NaN or infinity")
        if isinstance(item, str):
            _no_nul(item)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _no_nul(str(key))
                walk(sub)
        elif isinstance(item, list):
            for sub in item:
                walk(sub)

    walk(value)
    if len(json.dumps(value)) > MAX_JSON_BYTES:
        raise ValueError(f"larger than {MAX_JSON_BYTES} bytes of JSON")
    return value


SafeStr = Annotated[str, AfterValidator(_no_nul)]
JsonDict = Annotated[dict[str, Any], AfterValidator(_json_blob)]


class RequestModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ResponseModel(BaseModel):
    model_config = ConfigDict(extra="ignore")


class DeviceSelector(RequestModel):
    """Which devices may run a job: backend equal, name a substring, arch equal."""

    backend: Backend
    name: SafeStr | None = Field(default=None, min_length=1, max_length=200)
    arch: SafeStr | None = Field(default=None, min_length=1, max_length=64)


class BudgetIn(RequestModel):
    max_variants: StrictInt | None = Field(default=None, ge=1, le=MAX_BUDGET_VARIANTS)
    max_seconds: float | None = Field(default=None, gt=0, le=MAX_BUDGET_SECONDS)


class BudgetOut(ResponseModel):
    max_variants: int | None = None
    max_seconds: float | None = None


class DeviceOut(ResponseModel):
    backend: str
    name: str
    arch: str
    sm_count: int
    driver: str = ""
    runtime: str = ""
    memory_bytes: int = 0
    key: str = ""


class ToolchainOut(ResponseModel):
    compiler: str
    template_version: str
    libraries: dict[str, str] = Field(default_factory=dict)
    key: str = ""
