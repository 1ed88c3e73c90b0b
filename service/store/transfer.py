"""Export and import of best configs as JSON lines.

Each line is one best config with its winning measurement, device, toolchain and variant.
Merge rule on import: per key (op, dtype, layout, problem, device, toolchain) the faster
verified median wins, and the row already stored stays unless the imported one is more than
TIE_BAND (2%) faster (the same rule as re-tuning). Imported measurements are kept as history
either way. An import is all-or-nothing: any bad line is a 422 and nothing is stored.

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

from pydantic import Field, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import InvalidInput
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
from service.schemas.worker import ToolchainIn
from service.store.best import upsert_best
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.models import BestConfig, Device, Measurement, Toolchain, Variant
from service.store.validation import check_layout, parse_problem
from service.store.views import device_dict, toolchain_dict

__all__ = ["ExportRecord", "export_lines", "import_lines", "MAX_IMPORT_LINES"]

MAX_IMPORT_LINES = 100_000


class VariantRecord(RequestModel):
    id: SafeStr = Field(min_length=1, max_length=64)
    name: SafeStr = Field(min_length=1, max_length=300)
    params: JsonDict


class MeasurementRecord(RequestModel):
    outcome: Literal["ok"]
    median_us: float = Field(gt=0, le=1e12)
    p20_us: float | None = Field(default=None, gt=0, le=1e12)
    p80_us: float | None = Field(default=None, gt=0, le=1e12)
    min_us: float | None = Field(default=None, gt=0, le=1e12)
    reps: int | None = Field(default=None, ge=0, le=2**53)
    throughput: float | None = Field(default=None, ge=0, le=1e15)
    throughput_unit: SafeStr = Field(default="", max_length=32)
    compile_seconds: float | None = Field(default=None, ge=0, le=1e7)
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
    rows = session.execute(
        select(BestConfig, Measurement, Variant, Device, Toolchain)
        .join(Measurement, Measurement.id == BestConfig.measurement_id)
        .join(Variant, Variant.id == Measurement.variant_id)
        .join(Device, Device.id == BestConfig.device_id)
        .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
        .order_by(BestConfig.id)
    )
    for best, m, variant, device, toolchain in rows:
        device_fields = device_dict(device)
        device_fields.pop("key")
        toolchain_fields = toolchain_dict(toolchain)
        toolchain_fields.pop("key")
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
                "median_us": m.median_us,
                "p20_us": m.p20_us,
                "p80_us": m.p80_us,
                "min_us": m.min_us,
                "reps": m.reps,
                "throughput": m.throughput,
                "throughput_unit": m.throughput_unit,
                "compile_seconds": m.compile_seconds,
                "provenance": m.provenance,
                "suspect": m.suspect,
                "created_at": m.created_at.isoformat(),
            },
        }
        yield json.dumps(record, sort_keys=True) + "\n"


def _parse(text: str) -> list[ExportRecord]:
    records: list[ExportRecord] = []
    lines = text.splitlines()
    if len(lines) > MAX_IMPORT_LINES:
        raise InvalidInput(["body"], f"more than {MAX_IMPORT_LINES} lines")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = ExportRecord.model_validate_json(line)
        except ValidationError as exc:
            error = exc.errors()[0]
            raise InvalidInput(["body", number, *error["loc"]], error["msg"]) from None
        check_layout(record.op, record.layout, ["body", number, "layout"])
        parse_problem(record.op, record.problem, ["body", number, "problem"])
        records.append(record)
    if not records:
        raise InvalidInput(["body"], "no records: send JSON lines as GET /v1/export writes them")
    return records


def import_lines(session: Session, text: str) -> dict[str, int]:
    """Merge the records (see the module doc); returns counts. The caller commits."""
    records = _parse(text)
    counts = {"records": len(records), "inserted": 0, "replaced": 0, "kept": 0}
    for record in records:
        problem = parse_problem(record.op, record.problem, ["body"])
        device = device_row(session, **record.device.model_dump())
        toolchain = toolchain_row(session, **record.toolchain.model_dump())
        ensure_variants(
            session, record.op, [(record.variant.id, record.variant.name, record.variant.params)]
        )
        fields = record.measurement.model_dump(exclude_none=True)
        measurement = Measurement(
            **fields,
            variant_id=record.variant.id,
            op=record.op,
            dtype=record.dtype,
            layout=record.layout,
            problem=problem.dims(),
            problem_key=problem.key(),
            device_id=device.id,
            toolchain_id=toolchain.id,
            log="imported",
        )
        session.add(measurement)
        session.flush()
        outcome = upsert_best(session, measurement, record.tie_set, record.unmeasured)
        counts[outcome] += 1
        if outcome != "kept" and record.confirmed:
            best = session.scalars(
                select(BestConfig).where(BestConfig.measurement_id == measurement.id)
            ).one()
            best.confirmed = True
    return counts
