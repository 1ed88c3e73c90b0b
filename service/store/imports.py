"""Import of best configs from JSON lines (``GET /v1/export``'s format), line by line, with the
checks of an upload, and idempotent.

Each line is checked on its own, as a worker's upload is (:mod:`service.store.checks`): the
record's fields (text, ranges, timings ordered), its layout and problem, a creation date no
later than now (``MAX_CLOCK_SKEW`` allowed), timings the device can reach for the problem
(:mod:`service.store.bounds`), its variant id not stored as another variant, and with
``verify`` a sha256 variant id and a variant the op's space accepts for the problem on the
record's device. A line that fails is refused and reported (line number, field, reason) and
the others are merged (:mod:`service.store.transfer` says how; a record beating the stored
winner by more than TUNEHUB_RECORD_MARGIN is held unless the exporter marked it confirmed).
A record stored already (same key, variant, median and date; an undated record: same p20
and p80, imported) is a duplicate: nothing is added, so importing a file twice changes
nothing and a file fixed after a refusal can be sent again whole. A leading UTF-8 byte order
mark is skipped. When no line was imported or found stored and some were refused, the
answer is a 422 listing them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, timedelta

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.errors import InvalidInput
from service.schemas.configs import ImportRefusal, ImportSummary
from service.schemas.messages import validation_message
from service.store.best import upsert_best
from service.store.checks import impossible, variant_clash, variant_id_error
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.models import BestConfig, Device, Measurement, Toolchain, Variant, utcnow
from service.store.transfer import ExportRecord
from service.store.validation import check_layout, parse_problem
from tuner.acceptance import variant_rejection
from tuner.problems import Problem
from tuner.types import Toolchain as ToolchainKey

__all__ = ["MAX_IMPORT_LINES", "MAX_REPORTED", "MAX_CLOCK_SKEW", "import_lines"]

MAX_IMPORT_LINES = 100_000
#: refused lines listed in an answer (all are counted)
MAX_REPORTED = 100
#: a record dated later than now by more than this is refused (clocks differ a little)
MAX_CLOCK_SKEW = timedelta(days=1)
_BOM = "\ufeff"


class _Refused(Exception):
    def __init__(self, loc: list[str | int], msg: str) -> None:
        super().__init__(msg)
        self.loc, self.msg = loc, msg


@dataclass
class _Report:
    records: int = 0
    inserted: int = 0
    replaced: int = 0
    kept: int = 0
    held: int = 0
    duplicates: int = 0
    refused: int = 0
    errors: list[ImportRefusal] = field(default_factory=list)

    def refuse(self, line: int, error: _Refused) -> None:
        self.refused += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(ImportRefusal(line=line, loc=list(error.loc), msg=error.msg))


def _record(line: str, number: int) -> ExportRecord:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise _Refused(["body", number], f"malformed JSON: {exc}") from None
    except RecursionError:
        raise _Refused(["body", number], "JSON nested too deeply") from None
    try:
        return ExportRecord.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise _Refused(["body", number, *error["loc"]], validation_message(error)) from None


def _checked(session: Session, record: ExportRecord, number: int, verify: bool) -> Problem:
    """The record's problem once every check passed; _Refused naming the field otherwise."""
    at: list[str | int] = ["body", number]
    try:
        check_layout(record.op, record.layout, [*at, "layout"])
        problem = parse_problem(record.op, record.problem, [*at, "problem"])
    except InvalidInput as exc:
        raise _Refused(exc.loc, exc.detail) from None
    created = record.measurement.created_at
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=UTC)  # an undated zone is UTC, as exports write it
    if created is not None and created > utcnow() + MAX_CLOCK_SKEW:
        raise _Refused(
            [*at, "measurement", "created_at"], f"{created.isoformat()} is in the future"
        )
    device = record.device
    stored_device = session.scalars(
        select(Device).filter_by(
            backend=device.backend, name=device.name, arch=device.arch, sm_count=device.sm_count
        )
    ).first()
    m = record.measurement
    timings = {"min_us": m.min_us, "p20_us": m.p20_us, "median_us": m.median_us}
    found = impossible(problem, record.dtype, stored_device, device.name, timings)
    if found is not None:
        raise _Refused([*at, "measurement", found[0]], f"impossible: {found[1]}")
    variant = record.variant
    if verify and (bad_id := variant_id_error(variant.id)) is not None:
        raise _Refused([*at, "variant", "id"], bad_id)
    clash = variant_clash(session.get(Variant, variant.id), record.op, variant.name, variant.params)
    if clash is not None:
        raise _Refused([*at, "variant", "id"], clash)
    if verify:
        reason = variant_rejection(
            record.op,
            device.backend,
            record.dtype,
            record.layout,
            device.arch,
            problem,
            variant.params,
            variant.name,
        )
        if reason is not None:
            raise _Refused([*at, "variant", "name"], f"{variant.name!r}: {reason}")
    return problem


def _stored_already(session: Session, record: ExportRecord, problem: Problem) -> bool:
    """Whether the record's measurement is stored (an earlier import, or the exporter's row)."""
    device = record.device
    device_id = session.scalar(
        select(Device.id).filter_by(
            backend=device.backend, name=device.name, arch=device.arch, sm_count=device.sm_count
        )
    )
    tc = record.toolchain
    key = ToolchainKey(tc.compiler, tc.template_version, dict(tc.libraries)).key()
    toolchain_id = session.scalar(select(Toolchain.id).where(Toolchain.key == key))
    if device_id is None or toolchain_id is None:
        return False
    m = record.measurement
    query = select(Measurement.id).where(
        Measurement.op == record.op,
        Measurement.dtype == record.dtype,
        Measurement.layout == record.layout,
        Measurement.problem_key == problem.key(),
        Measurement.device_id == device_id,
        Measurement.toolchain_id == toolchain_id,
        Measurement.variant_id == record.variant.id,
        Measurement.median_us == m.median_us,
    )
    if m.created_at is not None:
        query = query.where(Measurement.created_at == m.created_at)
    else:
        query = query.where(
            Measurement.p20_us == m.p20_us
            if m.p20_us is not None
            else Measurement.p20_us.is_(None),
            Measurement.p80_us == m.p80_us
            if m.p80_us is not None
            else Measurement.p80_us.is_(None),
            Measurement.log == "imported",
        )
    return session.scalar(query.limit(1)) is not None


def _store(
    session: Session, record: ExportRecord, problem: Problem, record_margin: float | None
) -> str:
    device = device_row(session, **record.device.model_dump())
    toolchain = toolchain_row(session, **record.toolchain.model_dump())
    variant = record.variant
    ensure_variants(session, record.op, [(variant.id, variant.name, variant.params)])
    measurement = Measurement(
        **record.measurement.model_dump(exclude_none=True),
        variant_id=variant.id,
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
    # a record the exporter's hosts confirmed is served; another is held like an upload's
    margin = None if record.confirmed else record_margin
    outcome = upsert_best(
        session, measurement, record.tie_set, record.unmeasured, record_margin=margin
    )
    if outcome != "kept" and record.confirmed:
        best = session.scalars(
            select(BestConfig).where(BestConfig.measurement_id == measurement.id)
        ).one()
        best.confirmed = True
    return outcome


def import_lines(
    session: Session, text: str, *, verify: bool = True, record_margin: float | None = None
) -> ImportSummary:
    """Merge the records (see the module doc); returns the counts and the refused lines.
    Raises InvalidInput when nothing could be imported. The caller commits."""
    lines = text.removeprefix(_BOM).splitlines()
    if len(lines) > MAX_IMPORT_LINES:
        raise InvalidInput(["body"], f"more than {MAX_IMPORT_LINES} lines")
    report = _Report()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        report.records += 1
        try:
            record = _record(line, number)
            problem = _checked(session, record, number, verify)
        except _Refused as error:
            report.refuse(number, error)
            continue
        if _stored_already(session, record, problem):
            report.duplicates += 1
            continue
        outcome = _store(session, record, problem, record_margin)
        setattr(report, outcome, getattr(report, outcome) + 1)
    if not report.records:
        raise InvalidInput(["body"], "no records: send JSON lines as GET /v1/export writes them")
    if report.refused == report.records:
        first, *rest = report.errors
        more = [(e.loc, e.msg) for e in rest]
        raise InvalidInput(first.loc, first.msg, more)
    return ImportSummary(
        records=report.records,
        inserted=report.inserted,
        replaced=report.replaced,
        kept=report.kept,
        held=report.held,
        duplicates=report.duplicates,
        refused=report.refused,
        errors=report.errors,
    )
