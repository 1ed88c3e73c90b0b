"""Export of best configs as JSON lines, and the record format an import reads back.

Each line is one best config with its winning measurement, device, toolchain and variant.
The import (:mod:`service.store.imports`) checks each line as an upload is checked and merges
it: per key (op, dtype, layout, problem, device, toolchain) the faster verified median wins,
and the row already stored stays unless the imported one is faster with confidence (the same
rule as re-tuning). Imported measurements are kept as history either way.

A record's ``tie_set`` and ``unmeasured`` travel with it into the stored best config as
:func:`service.store.best.upsert_best` merges them (lines without them: the winner alone,
complete). ``confirmed`` travels with a record (:mod:`service.store.confirm`): an imported
record that becomes the stored winner is confirmed as the exporting service said (an import
is an admin's act, like the upload of another host); a record that does not win changes
nothing. Lines written before the field existed import as not confirmed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field
from sqlalchemy.orm import Session

from service.schemas.common import (
    MAX_BUDGET_VARIANTS,
    DeviceIn,
    DType,
    JsonBool,
    JsonDict,
    Op,
    RequestModel,
    SafeStr,
)
from service.schemas.measurement import MEASURED_FIELDS, MeasuredValues
from service.schemas.worker import ToolchainIn
from service.store.keys import device_out, toolchain_out
from service.store.measurements import joined_best
from service.store.models import BestConfig

__all__ = ["ExportRecord", "MeasurementRecord", "VariantRecord", "export_lines"]


class VariantRecord(RequestModel):
    id: SafeStr = Field(min_length=1, max_length=64)
    name: SafeStr = Field(min_length=1, max_length=300)
    params: JsonDict


class MeasurementRecord(RequestModel, MeasuredValues):
    """An exported winner's measurement: its measured values (verified: a median), how it
    was measured, when."""

    outcome: Literal["ok"]
    median_us: float = Field(gt=0, le=1e12)
    provenance: JsonDict = Field(default_factory=dict)
    suspect: JsonBool = False
    created_at: datetime | None = None


class ExportRecord(RequestModel):
    op: Op
    dtype: DType
    layout: SafeStr = Field(max_length=16)
    problem: dict[str, Any]
    device: DeviceIn
    toolchain: ToolchainIn
    variant: VariantRecord
    measurement: MeasurementRecord
    #: the winner was re-measured by another host on the exporting service
    confirmed: JsonBool = False
    #: the variants the deciding job could not tell from the winner (tuner.winner)
    tie_set: list[Annotated[SafeStr, Field(max_length=300)]] = Field(
        default_factory=list, max_length=64
    )
    #: budgeted candidates its jobs left unmeasured (0: complete)
    unmeasured: int = Field(default=0, ge=0, le=MAX_BUDGET_VARIANTS)


def export_lines(session: Session) -> Iterator[str]:
    rows = session.execute(joined_best().order_by(BestConfig.id))
    for best, m, variant, device, toolchain in rows:
        device_fields = device_out(device).model_dump(exclude={"key"})
        toolchain_fields = toolchain_out(toolchain).model_dump(exclude={"key"})
        record = {
            "op": best.op,
            "dtype": best.dtype,
            "layout": best.layout,
            "problem": best.problem,
            "device": device_fields,
            "toolchain": toolchain_fields,
            "variant": {"id": variant.id, "name": variant.name, "params": variant.params},
            "confirmed": best.confirmed,
            "tie_set": list(best.tie_set or []),
            "unmeasured": best.unmeasured,
            "measurement": {
                "outcome": m.outcome,
                **{name: getattr(m, name) for name in MEASURED_FIELDS},
                "provenance": m.provenance,
                "suspect": m.suspect,
                "created_at": m.created_at.isoformat(),
            },
        }
        yield json.dumps(record, sort_keys=True) + "\n"
