"""What makes an import fast without changing what it decides (:mod:`service.store.imports`).

Line by line, an import read its device, toolchain and variant, looked for the measurement
stored already, inserted the measurement and upserted the best config: about ten statements a
line (200 lines/s on PostgreSQL). The decisions stay per line and in order; the reads and
writes are shared:

- :class:`ImportMemo`: devices and toolchains by key (read once; ``device_row`` called again
  only when a line reports other driver/runtime/memory), the best keys stored and the
  (variant, problem) pairs measured, read once per chunk of lines; a line is looked up as a
  possible duplicate only when its pair was measured;
- :class:`PendingInserts`: a line whose best key is stored nowhere (nor earlier in the
  import) inserts its measurement and best config in one executemany per chunk; the best
  configs are inserted ignoring conflicts, and a line whose key another writer stored
  meanwhile goes through ``upsert_best`` as before. Anything else (a key stored already, a
  possible duplicate) first writes what is pending, then takes the line-by-line path.

Per chunk, on PostgreSQL the reads and writes are one short statement each
(:mod:`service.store.pg_bulk`: ids from the sequence, the measurements by COPY, the best
configs from arrays with RETURNING, the keys read by array); on SQLite Core executemany and
IN lists of 500 (a statement there costs no round trip and no query parse in the driver).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from service.store import pg_bulk
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.models import (
    BEST_CONFIG_KEY,
    BestConfig,
    Device,
    Measurement,
    Toolchain,
    Variant,
    utcnow,
)
from service.store.transfer import ExportRecord
from tuner.problems import Problem
from tuner.types import Toolchain as ToolchainKey

__all__ = [
    "CHUNK_LINES",
    "BestKey",
    "ImportMemo",
    "PendingInserts",
    "best_key_of",
    "measured_pair",
]

#: lines read, checked and written together
CHUNK_LINES = 1000
BestKey = tuple[str, str, str, str, int, int]
_IN_LIMIT = 500  # values per IN list


def _device_key(record: ExportRecord) -> tuple[str, str, str, int]:
    d = record.device
    return (d.backend, d.name, d.arch, d.sm_count)


_TOOLCHAIN_KEYS: dict[tuple[str, str, tuple[tuple[str, str], ...]], str] = {}


def _toolchain_key(record: ExportRecord) -> str:
    """The toolchain's key (a hash of its fields), computed once per distinct toolchain."""
    tc = record.toolchain
    fields = (tc.compiler, tc.template_version, tuple(sorted(tc.libraries.items())))
    key = _TOOLCHAIN_KEYS.get(fields)
    if key is None:
        if len(_TOOLCHAIN_KEYS) > 1000:
            _TOOLCHAIN_KEYS.clear()
        key = _TOOLCHAIN_KEYS[fields] = ToolchainKey(
            tc.compiler, tc.template_version, dict(tc.libraries)
        ).key()
    return key


def best_key_of(record: ExportRecord, key: str, device_id: int, toolchain_id: int) -> BestKey:
    return (record.op, record.dtype, record.layout, key, device_id, toolchain_id)


class ImportMemo:
    """One import's reads, kept while it runs (the import's own writes update them)."""

    def __init__(self) -> None:
        self._devices: dict[tuple[str, str, str, int], Device | None] = {}
        self._reported: dict[tuple[str, str, str, int], tuple[str, str, int]] = {}
        self._toolchains: dict[str, Toolchain | None] = {}
        self._variants: set[str] = set()
        #: variants of lines checked in this import (stored or about to be), by id
        self.checked_variants: dict[str, Variant] = {}
        # a problem's key and dims, computed once (each is called several times a line)
        self._problems: dict[int, tuple[Problem, str, dict[str, Any]]] = {}
        self.best_keys: set[BestKey] = set()
        self.measured: set[tuple[str, str]] = set()

    def key(self, problem: Problem) -> str:
        return self._problem(problem)[1]

    def dims(self, problem: Problem) -> dict[str, Any]:
        return self._problem(problem)[2]

    def _problem(self, problem: Problem) -> tuple[Problem, str, dict[str, Any]]:
        found = self._problems.get(id(problem))
        if found is None or found[0] is not problem:
            # the problem is kept in the entry, so its id is not reused while it is there
            found = self._problems[id(problem)] = (problem, problem.key(), problem.dims())
        return found

    def end_chunk(self) -> None:
        self._problems = {}

    def stored_device(self, session: Session, record: ExportRecord) -> Device | None:
        key = _device_key(record)
        if key not in self._devices:
            backend, name, arch, sm_count = key
            self._devices[key] = session.scalars(
                select(Device).filter_by(backend=backend, name=name, arch=arch, sm_count=sm_count)
            ).first()
        return self._devices[key]

    def stored_toolchain(self, session: Session, record: ExportRecord) -> Toolchain | None:
        key = _toolchain_key(record)
        if key not in self._toolchains:
            self._toolchains[key] = session.scalars(
                select(Toolchain).where(Toolchain.key == key)
            ).first()
        return self._toolchains[key]

    def device(self, session: Session, record: ExportRecord) -> Device:
        """``device_row`` for the record's device, called only when its report differs."""
        key = _device_key(record)
        report = (record.device.driver, record.device.runtime, record.device.memory_bytes)
        device = self._devices.get(key)
        if device is None or self._reported.get(key) != report:
            device = device_row(session, **record.device.model_dump())
            self._devices[key] = device
            self._reported[key] = report
        return device

    def toolchain(self, session: Session, record: ExportRecord) -> Toolchain:
        key = _toolchain_key(record)
        toolchain = self._toolchains.get(key)
        if toolchain is None:
            toolchain = toolchain_row(session, **record.toolchain.model_dump())
            self._toolchains[key] = toolchain
        return toolchain

    def variant(self, session: Session, record: ExportRecord) -> None:
        v = record.variant
        if v.id not in self._variants:
            ensure_variants(session, record.op, [(v.id, v.name, v.params)])
            self._variants.add(v.id)

    def prefetch(self, session: Session, lines: Sequence[tuple[ExportRecord, Problem]]) -> None:
        """The stored best keys and measured (variant, problem) pairs the lines may meet."""
        keys = sorted({self.key(problem) for _, problem in lines})
        variants = sorted({record.variant.id for record, _ in lines})
        if pg_bulk.applies(session):  # one statement each, the keys as an array
            self.best_keys.update(
                pg_bulk.rows_where_in(session, BestConfig, BEST_CONFIG_KEY, {"problem_key": keys})
            )
            pairs = pg_bulk.rows_where_in(
                session,
                Measurement,
                ("variant_id", "problem_key"),
                {"problem_key": keys, "variant_id": variants},
                distinct=True,
            )
            self.measured.update(pairs)  # type: ignore[arg-type]
            return
        for start in range(0, len(keys), _IN_LIMIT):
            part = keys[start : start + _IN_LIMIT]
            self.best_keys.update(
                session.execute(
                    select(
                        BestConfig.op,
                        BestConfig.dtype,
                        BestConfig.layout,
                        BestConfig.problem_key,
                        BestConfig.device_id,
                        BestConfig.toolchain_id,
                    ).where(BestConfig.problem_key.in_(part))
                ).all()
            )
            for v_start in range(0, len(variants), _IN_LIMIT):
                self.measured.update(
                    session.execute(
                        select(Measurement.variant_id, Measurement.problem_key)
                        .where(
                            Measurement.problem_key.in_(part),
                            Measurement.variant_id.in_(variants[v_start : v_start + _IN_LIMIT]),
                        )
                        .distinct()
                    ).all()
                )


@dataclass
class _Line:
    record: ExportRecord
    key: str
    dims: dict[str, Any]
    device_id: int
    toolchain_id: int
    margin: float | None


class PendingInserts:
    """Lines of new best keys, written together by :meth:`flush`."""

    def __init__(
        self,
        upsert: Callable[[Session, Measurement, ExportRecord, float | None], str],
        recount: Callable[[list[str]], None],
    ) -> None:
        self._lines: list[_Line] = []
        self._upsert = upsert
        self._recount = recount

    def flush_into(self, session: Session) -> None:
        """:meth:`flush`, reporting the corrected outcomes."""
        outcomes = self.flush(session)
        if outcomes:
            self._recount(outcomes)

    def add(
        self,
        record: ExportRecord,
        key: str,
        dims: dict[str, Any],
        device_id: int,
        toolchain_id: int,
        margin: float | None,
    ) -> None:
        self._lines.append(_Line(record, key, dims, device_id, toolchain_id, margin))

    def flush(self, session: Session) -> list[str]:
        """Write the pending lines; the outcomes of those that were not simply "inserted"
        (another writer stored their key meanwhile), for the report."""
        lines, self._lines = self._lines, []
        if not lines:
            return []
        measurements = [_measurement_row(line) for line in lines]
        bulk = pg_bulk.applies(session)
        if bulk:
            ids = pg_bulk.new_ids(session, Measurement, len(lines))
            for row, mid in zip(measurements, ids, strict=True):
                row["id"] = mid
            pg_bulk.copy_rows(session, Measurement, measurements)
        else:
            ids = _insert_measurements(session, measurements)
        now = utcnow()
        best = [_best_row(line, mid, now) for line, mid in zip(lines, ids, strict=True)]
        if bulk:
            stored = set(pg_bulk.insert_new(session, BestConfig, best, "measurement_id"))
        else:
            stored = _insert_best(session, best, ids)
        outcomes: list[str] = []
        for line, mid in zip(lines, ids, strict=True):
            if mid not in stored:
                measurement = session.get(Measurement, mid)
                assert measurement is not None
                outcomes.append(self._upsert(session, measurement, line.record, line.margin))
        return outcomes


def _measurement_row(line: _Line) -> dict[str, Any]:
    """A pending line's measurement row (the columns it leaves out take their defaults)."""
    record = line.record
    return {
        **record.measurement.model_dump(exclude_none=True),
        "variant_id": record.variant.id,
        **_key_columns(line),
        "log": "imported",
    }


def _key_columns(line: _Line) -> dict[str, Any]:
    """The columns a line's measurement and best config share: its problem on its device."""
    record = line.record
    return {
        "op": record.op,
        "dtype": record.dtype,
        "layout": record.layout,
        "problem": line.dims,
        "problem_key": line.key,
        "device_id": line.device_id,
        "toolchain_id": line.toolchain_id,
    }


def _best_row(line: _Line, measurement_id: int, now: datetime) -> dict[str, Any]:
    """A pending line's best config row."""
    record = line.record
    return {
        **_key_columns(line),
        "measurement_id": measurement_id,
        "tie_set": list(record.tie_set) or None,
        "unmeasured": record.unmeasured,
        "confirmed": record.confirmed,
        "created_at": now,
        "updated_at": now,
    }


def _insert_measurements(session: Session, rows: list[dict[str, Any]]) -> list[int]:
    """Insert measurement rows (one executemany per set of fields); their ids."""
    ids: list[int] = [0] * len(rows)
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, row in enumerate(rows):
        groups.setdefault(tuple(sorted(row)), []).append(index)
    for indexes in groups.values():
        # Core executemany (insertmanyvalues): one compiled statement for the group, where
        # the ORM's bulk path and multi-row VALUES spent seconds compiling 1,000 rows
        statement = insert(Measurement.__table__).returning(  # type: ignore[arg-type]
            Measurement.__table__.c.id, sort_by_parameter_order=True
        )
        result = session.connection().execute(statement, [rows[i] for i in indexes])
        for index, mid in zip(indexes, result.scalars(), strict=True):
            ids[index] = mid
    return ids


def _insert_best(session: Session, rows: list[dict[str, Any]], ids: list[int]) -> set[int]:
    """Insert best config rows ignoring conflicts (one executemany: a statement compiled
    once); the measurement ids of those stored."""
    insert_for = (
        postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    )
    statement = insert_for(BestConfig).on_conflict_do_nothing()
    session.connection().execute(statement, rows)
    stored: set[int] = set()
    for start in range(0, len(ids), _IN_LIMIT):
        stored.update(
            session.scalars(
                select(BestConfig.measurement_id).where(
                    BestConfig.measurement_id.in_(ids[start : start + _IN_LIMIT])
                )
            )
        )
    return stored


def measured_pair(record: ExportRecord, key: str) -> tuple[str, str]:
    return (record.variant.id, key)
