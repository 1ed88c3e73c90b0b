"""Models of client-measured results (``/v1/client-results``, ``/v1/client-configs/best``).

A client such as the Triton autotune drop-in (:mod:`service.integrations.triton`) benchmarks
its own kernel's configs and shares the winner. Such results live under their own op family
(``triton:<kernel hash>``), apart from the worker-verified results of the built-in ops, so they
can never replace a built-in winner. The key is the kernel's autotune key: names to scalars.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, model_validator

from service.schemas.common import (
    COMPLETE_DEVICE_SCHEMA,
    COMPLETE_TOOLCHAIN_SCHEMA,
    TEXT_PATTERN,
    DeviceOut,
    DeviceReport,
    JsonDict,
    RequestModel,
    ResponseModel,
    SafeStr,
    ToolchainOut,
)
from service.schemas.worker import MEDIAN_WHEN_OK, ToolchainReport, timing_order_error

__all__ = [
    "CLIENT_OP_PATTERN",
    "MAX_CLIENT_MEASUREMENTS",
    "MAX_KEY_BYTES",
    "ClientKey",
    "CLIENT_KEY_SCHEMA",
    "canonical_key",
    "ClientMeasurementIn",
    "ClientResultsIn",
    "ClientBestOut",
    "ClientResultsOut",
]

#: a client op family: ``triton:`` and the kernel's source hash (hex, 16 to 64 digits)
CLIENT_OP_PATTERN = r"^triton:[0-9a-f]{16,64}$"
MAX_CLIENT_MEASUREMENTS = 1024
#: the canonical key text is at most this long
MAX_KEY_BYTES = 4096

ClientOutcome = Literal["ok", "compile_error", "runtime_error", "timeout", "wrong_result"]


def canonical_key(key: dict[str, Any]) -> str:
    """The one text of a key: sorted names, no spaces (what the service stores and matches)."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _scalar_key(key: dict[str, Any]) -> dict[str, Any]:
    if len(key) > 64:
        raise ValueError("at most 64 names")
    for name, value in key.items():
        if not isinstance(value, str | int | float | bool) and value is not None:
            raise ValueError(f"{name!r}: values must be strings, numbers, booleans or null")
    if len(canonical_key(key)) > MAX_KEY_BYTES:
        raise ValueError(f"longer than {MAX_KEY_BYTES} characters as JSON")
    return key


#: JSON schema of a key: up to 64 names to scalars (and at most MAX_KEY_BYTES as JSON)
CLIENT_KEY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "maxProperties": 64,
    "propertyNames": {"pattern": TEXT_PATTERN},
    "additionalProperties": {
        "anyOf": [
            {"type": "string", "pattern": TEXT_PATTERN},
            {"type": "number"},
            {"type": "boolean"},
            {"type": "null"},
        ]
    },
}
ClientKey = Annotated[
    JsonDict, AfterValidator(_scalar_key), WithJsonSchema(CLIENT_KEY_SCHEMA, mode="validation")
]


class ClientMeasurementIn(RequestModel):
    """One config of the kernel as the client timed it."""

    model_config = ConfigDict(json_schema_extra={**MEDIAN_WHEN_OK})

    config_name: SafeStr = Field(min_length=1, max_length=300)
    params: JsonDict
    outcome: ClientOutcome = "ok"
    median_us: float | None = Field(default=None, gt=0, le=1e12)
    p20_us: float | None = Field(default=None, gt=0, le=1e12)
    p80_us: float | None = Field(default=None, gt=0, le=1e12)
    log: SafeStr = Field(default="", max_length=4000)

    @model_validator(mode="after")
    def _ok_has_time(self) -> ClientMeasurementIn:
        if self.outcome == "ok" and self.median_us is None:
            raise ValueError("median_us is required when outcome is 'ok'")
        reason = timing_order_error(self.median_us, self.p20_us, self.p80_us, None)
        if reason is not None:
            raise ValueError(reason)
        return self


class ClientResultsIn(RequestModel):
    """Body of ``POST /v1/client-results`` (a ``submit``-scope token)."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "properties": {
                        "device": COMPLETE_DEVICE_SCHEMA,
                        "toolchain": COMPLETE_TOOLCHAIN_SCHEMA,
                    }
                }
            ]
        }
    )

    op: SafeStr = Field(pattern=CLIENT_OP_PATTERN, max_length=80)
    kernel_name: SafeStr = Field(min_length=1, max_length=200)
    key: ClientKey
    device: DeviceReport
    toolchain: ToolchainReport
    measurements: list[ClientMeasurementIn] = Field(
        min_length=1, max_length=MAX_CLIENT_MEASUREMENTS
    )
    #: how the client measured (timer, reps, clocks where it can read them): kept with each row
    provenance: JsonDict = Field(default_factory=dict)

    @model_validator(mode="after")
    def _complete_keys(self) -> ClientResultsIn:
        if not self.device.is_complete():
            raise ValueError("device needs backend, name, arch and sm_count >= 1")
        if not self.toolchain.compiler or not self.toolchain.template_version:
            raise ValueError("toolchain needs compiler and template_version")
        return self


class ClientBestOut(ResponseModel):
    op: str
    kernel_name: str
    key: dict[str, Any]
    config_name: str
    params: dict[str, Any]
    median_us: float | None
    p20_us: float | None
    p80_us: float | None
    device: DeviceOut
    toolchain: ToolchainOut
    measured_at: datetime
    #: always "client": measured by the client that uploaded it, not by a tunehub worker
    source: str = "client"


class ClientResultsOut(ResponseModel):
    stored: int
    #: the key's best config after this upload (None when nothing verified)
    best: ClientBestOut | None = None
    #: what happened to the stored best: inserted, replaced, kept (within the tie band), none
    outcome: str = "none"
