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

import gc
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
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
from service.store.import_batches import (
    CHUNK_LINES,
    ImportMemo,
    PendingInserts,
    best_key_of,
    measured_pair,
)
from service.store.models import BestConfig, Measurement, Variant, utcnow
from service.store.transfer import ExportRecord
from service.store.validation import check_layout, parse_problem
from tuner.acceptance import variant_rejection
from tuner.problems import Problem

__all__ = ["MAX_IMPORT_LINES", "MAX_REPORTED", "MAX_CLOCK_SKEW", "import_lines", "paused_gc"]

MAX_IMPORT_LINES = 100_000
#: refused lines listed in an answer (all are counted)
MAX_REPORTED = 100
#: a record dated later than now by more than this is refused (clocks differ a little)
MAX_CLOCK_SKEW = timedelta(days=1)
_BOM = "\ufeff"


_gc_lock = threading.Lock()
_gc_pauses = 0  # imports running with the cyclic GC paused (any thread)
_gc_was_enabled = False  # whether the first of them found it enabled


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the block runs, in the whole process.

    An import allocates millions of small objects (records, rows, parameters) and keeps many
    of them (its memo, the session's rows), so the collector's passes over the growing heap
    cost a fifth of its time while finding next to nothing: its objects are freed by
    reference counting. Counted, so that imports running at once in several threads resume
    collection only when the last one ends, and only if it was enabled when the first began.
    Other threads of the process run without it meanwhile too (a pause of a few seconds).
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


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

    def recount(self, outcomes: list[str]) -> None:
        """Lines counted "inserted" whose key another writer stored meanwhile: their outcomes."""
        for outcome in outcomes:
            self.inserted -= 1
            setattr(self, outcome, getattr(self, outcome) + 1)

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


def _checked(
    session: Session, record: ExportRecord, number: int, verify: bool, memo: ImportMemo
) -> Problem:
    """The record's problem once every check passed; _Refused naming the field otherwise."""
    at: list[str | int] = ["body", number]
    try:
        check_layout(record.op, record.layout, [*at, "layout"])
        problem = parse_problem(record.op, record.problem, [*at, "problem"], record.dtype)
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
    stored_device = memo.stored_device(session, record)
    m = record.measurement
    timings = {"min_us": m.min_us, "p20_us": m.p20_us, "median_us": m.median_us}
    found = impossible(problem, record.dtype, stored_device, device.name, timings)
    if found is not None:
        raise _Refused([*at, "measurement", found[0]], f"impossible: {found[1]}")
    variant = record.variant
    if verify and (bad_id := variant_id_error(variant.id)) is not None:
        raise _Refused([*at, "variant", "id"], bad_id)
    seen = memo.checked_variants.get(variant.id)
    same = seen is not None and (seen.op, seen.name, seen.params) == (
        record.op,
        variant.name,
        variant.params,
    )  # a variant an earlier line passed with: the same verdict, without canonical params
    if not same:
        stored_variant = seen or session.get(Variant, variant.id)
        clash = variant_clash(stored_variant, record.op, variant.name, variant.params)
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
    # a later line of the chunk is checked against this one's variant, as if it were stored
    if variant.id not in memo.checked_variants:
        memo.checked_variants[variant.id] = Variant(
            id=variant.id, op=record.op, name=variant.name, params=variant.params
        )
    return problem


def _stored_already(
    session: Session, record: ExportRecord, problem: Problem, memo: ImportMemo
) -> bool:
    """Whether the record's measurement is stored (an earlier import, or the exporter's row)."""
    if measured_pair(record, memo.key(problem)) not in memo.measured:
        return False  # no measurement of this variant and problem at all
    stored_device = memo.stored_device(session, record)
    stored_toolchain = memo.stored_toolchain(session, record)
    if stored_device is None or stored_toolchain is None:
        return False
    device_id, toolchain_id = stored_device.id, stored_toolchain.id
    m = record.measurement
    query = select(Measurement.id).where(
        Measurement.op == record.op,
        Measurement.dtype == record.dtype,
        Measurement.layout == record.layout,
        Measurement.problem_key == memo.key(problem),
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


def _upsert(
    session: Session, measurement: Measurement, record: ExportRecord, margin: float | None
) -> str:
    """The best config of a stored line's measurement (upsert_best), and ``confirmed``."""
    outcome = upsert_best(
        session, measurement, record.tie_set, record.unmeasured, record_margin=margin
    )
    if outcome != "kept" and record.confirmed:
        best = session.scalars(
            select(BestConfig).where(BestConfig.measurement_id == measurement.id)
        ).one()
        best.confirmed = True
    return outcome


def _store(
    session: Session,
    record: ExportRecord,
    problem: Problem,
    record_margin: float | None,
    memo: ImportMemo,
    pending: PendingInserts,
) -> str:
    """Store a checked line: pending (written with its chunk) when its best key is new,
    else at once through upsert_best. Its outcome ("inserted" for a pending line; the
    chunk's flush corrects the rare line whose key another writer stored meanwhile)."""
    device = memo.device(session, record)
    toolchain = memo.toolchain(session, record)
    memo.variant(session, record)
    key_text, dims = memo.key(problem), memo.dims(problem)
    memo.measured.add(measured_pair(record, key_text))
    # a record the exporter's hosts confirmed is served; another is held like an upload's
    margin = None if record.confirmed else record_margin
    key = best_key_of(record, key_text, device.id, toolchain.id)
    if key not in memo.best_keys:
        memo.best_keys.add(key)
        pending.add(record, key_text, dims, device.id, toolchain.id, margin)
        return "inserted"
    pending.flush_into(session)
    measurement = Measurement(
        **record.measurement.model_dump(exclude_none=True),
        variant_id=record.variant.id,
        op=record.op,
        dtype=record.dtype,
        layout=record.layout,
        problem=dims,
        problem_key=key_text,
        device_id=device.id,
        toolchain_id=toolchain.id,
        log="imported",
    )
    session.add(measurement)
    session.flush()
    return _upsert(session, measurement, record, margin)


def import_lines(
    session: Session, text: str, *, verify: bool = True, record_margin: float | None = None
) -> ImportSummary:
    """Merge the records (see the module doc); returns the counts and the refused lines.
    Raises InvalidInput when nothing could be imported. The caller commits."""
    with paused_gc():
        return _import_lines(session, text, verify, record_margin)


def _import_lines(
    session: Session, text: str, verify: bool, record_margin: float | None
) -> ImportSummary:
    lines = text.removeprefix(_BOM).splitlines()
    if len(lines) > MAX_IMPORT_LINES:
        raise InvalidInput(["body"], f"more than {MAX_IMPORT_LINES} lines")
    report = _Report()
    memo = ImportMemo()
    pending = PendingInserts(_upsert, report.recount)
    for start in range(0, len(lines), CHUNK_LINES):
        checked: list[tuple[ExportRecord, Problem]] = []
        for number, line in enumerate(lines[start : start + CHUNK_LINES], start=start + 1):
            if not line.strip():
                continue
            report.records += 1
            try:
                record = _record(line, number)
                checked.append((record, _checked(session, record, number, verify, memo)))
            except _Refused as error:
                report.refuse(number, error)
        memo.prefetch(session, checked)
        for record, problem in checked:
            if measured_pair(record, memo.key(problem)) in memo.measured:
                pending.flush_into(session)  # an earlier line of this import may be the one
            if _stored_already(session, record, problem, memo):
                report.duplicates += 1
                continue
            outcome = _store(session, record, problem, record_margin, memo, pending)
            setattr(report, outcome, getattr(report, outcome) + 1)
        pending.flush_into(session)
        memo.end_chunk()
    if not report.records:
        raise InvalidInput(["body"], "no records: send JSON lines as GET /v1/export writes them")
    if report.refused == report.records:
        first, *rest = report.errors
        more = [(e.loc, e.msg) for e in rest]
        raise InvalidInput(first.loc, first.msg, more)
    return ImportSummary.model_validate(report, from_attributes=True)
