"""An import writes the rows the ORM would, column by column, whichever way its chunk is
written: PostgreSQL's bulk statements (service.store.pg_bulk: COPY, unnest), the Core
executemany (SQLite's way, and PostgreSQL's before), and one line at a time through the ORM
and upsert_best (as an upload stores a measurement), on both databases."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from service.store import pg_bulk
from service.store.best import upsert_best
from service.store.db import make_engine, make_sessionmaker
from service.store.import_batches import ImportMemo
from service.store.imports import import_lines
from service.store.keys import device_row, ensure_variants, toolchain_row
from service.store.models import BestConfig, Measurement, Toolchain
from service.store.transfer import ExportRecord
from service.store.validation import parse_problem
from tests.service.store.test_import_checks import _record

#: columns that differ between the three writes by design: row ids, the toolchain and variant
#: each way writes under (so that its keys differ and no line meets another's measurement),
#: and the times of the write itself
_DIFFERENT = {
    Measurement: {"id", "toolchain_id", "variant_id"},
    BestConfig: {"id", "toolchain_id", "measurement_id", "created_at", "updated_at", "revision"},
}


#: the problem key of the undated line (its measurement is dated when written)
_UNDATED = "m=3,"


def _undated(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("created_at")}


def _lines(api: Any) -> list[dict[str, Any]]:
    """Lines that between them set every column: each measured value set and unset, zeros,
    nested and non-ASCII provenance, dated in UTC, another zone and no zone, and undated."""
    base = _record(api)
    full = copy.deepcopy(base)
    full["measurement"] |= {
        "reps": 1234,
        "throughput": 812.5,
        "throughput_unit": "GB/s",
        "compile_seconds": 1.75,
        "energy_j": 0.003,
        "provenance": {"clock_mhz": [1980, 1975.5], "host": "nœud-7 ✓", "nested": {"a": None}},
        "suspect": True,
        "created_at": "2026-12-01T12:00:00+02:00",
    }
    full |= {"tie_set": ["reduce_f32_p4_a2_u2", "reduce_f32_p1_a1_u1"], "unmeasured": 3}
    full["confirmed"] = True
    bare = copy.deepcopy(base)
    bare["measurement"] = {"outcome": "ok", "median_us": 70}  # undated, no quantiles, an int
    zeros = copy.deepcopy(base)
    zeros["measurement"] |= {"reps": 0, "throughput": 0.0, "energy_j": 0.0, "compile_seconds": 0}
    zeros["measurement"]["created_at"] = "2026-11-30T23:59:59.123456"  # no zone: UTC
    awkward = copy.deepcopy(base)
    median = 0.1 + 0.2 + 50  # a float whose shortest text has many digits
    awkward["measurement"] |= {"median_us": median, "p20_us": median * (1 - 1e-12)}
    awkward["measurement"] |= {"p80_us": median * 1.01, "min_us": median / 1.1}
    lines = [base, full, bare, zeros, awkward]
    for m, line in enumerate(lines, start=1):
        line["problem"] = {"m": m, "k": 4096, "kind": "sum"}
    return lines


#: the way of writing -> its variant id
_WAYS = {"one-by-one": "1" * 64, "bulk": "2" * 64, "executemany": "3" * 64}


def _under(lines: list[dict[str, Any]], way: str) -> list[dict[str, Any]]:
    moved = copy.deepcopy(lines)
    for line in moved:
        line["toolchain"]["template_version"] = way
        line["variant"]["id"] = _WAYS[way]
    return moved


def _text(lines: list[dict[str, Any]], way: str) -> str:
    return "\n".join(json.dumps(line) for line in _under(lines, way))


def _one_by_one(session: Session, lines: list[dict[str, Any]]) -> None:
    """Each line as an upload stores it: its measurement through the ORM, then upsert_best
    (and ``confirmed`` as an import keeps it for a record that wins)."""
    for line in lines:
        record = ExportRecord.model_validate(line)
        problem = parse_problem(record.op, record.problem, ["problem"])
        device = device_row(session, **record.device.model_dump())
        toolchain = toolchain_row(session, **record.toolchain.model_dump())
        v = record.variant
        ensure_variants(session, record.op, [(v.id, v.name, v.params)])
        measurement = Measurement(
            **record.measurement.model_dump(exclude_none=True),
            variant_id=v.id,
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
        assert upsert_best(session, measurement, record.tie_set, record.unmeasured) == "inserted"
        best = session.scalars(
            select(BestConfig).where(BestConfig.measurement_id == measurement.id)
        ).one()
        best.confirmed = record.confirmed
    session.commit()


def _rows(session: Session, model: Any, way: str) -> dict[str, dict[str, Any]]:
    """The rows a way wrote (under its toolchain), by problem key: each column compared as
    read back and as the database's own text of it (and the measurement's variant id)."""
    table = model.__table__
    compared = [c for c in table.columns if c.name not in _DIFFERENT[model]]
    statement = (
        select(*compared, *(cast(c, Text).label(f"{c.name} as text") for c in compared))
        .join(Toolchain, Toolchain.id == table.c.toolchain_id)
        .where(Toolchain.template_version == way)
    )
    rows: dict[str, dict[str, Any]] = {}
    for row in session.execute(statement):
        values = {c.name: row[i] for i, c in enumerate(compared)}
        values |= {f"{c.name} as text": row[len(compared) + i] for i, c in enumerate(compared)}
        rows[values["problem_key"]] = values
    return rows


def test_every_way_of_writing_a_chunk_stores_the_rows_of_the_orm(
    api: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines(api)
    engine = make_engine(database_url)
    maker = make_sessionmaker(engine)
    postgresql = engine.dialect.name == "postgresql"
    started = datetime.now(UTC)
    try:
        with maker() as session:
            _one_by_one(session, _under(lines, "one-by-one"))
        bulk_calls: list[str] = []
        copy_rows = pg_bulk.copy_rows
        monkeypatch.setattr(
            pg_bulk, "copy_rows", lambda *a: bulk_calls.append("copy") or copy_rows(*a)
        )
        with maker() as session:
            answer = import_lines(session, _text(lines, "bulk"), verify=False)
            session.commit()
        assert answer.inserted == len(lines)
        assert bulk_calls == (["copy"] if postgresql else [])  # the way under test was taken
        monkeypatch.setattr(pg_bulk, "applies", lambda session: False)
        with maker() as session:
            answer = import_lines(session, _text(lines, "executemany"), verify=False)
            session.commit()
        assert answer.inserted == len(lines) and len(bulk_calls) == len(set(bulk_calls))
        with maker() as session:
            for model in (Measurement, BestConfig):
                reference = _rows(session, model, "one-by-one")
                assert len(reference) == len(lines)
                for way in ("bulk", "executemany"):
                    written = _rows(session, model, way)
                    for key, row in reference.items():
                        if key.startswith(_UNDATED):  # dated by the write: checked below
                            row, written[key] = _undated(row), _undated(written[key])
                        assert written[key] == row, (model.__name__, way, key)
            undated = session.scalars(
                select(Measurement.created_at).where(Measurement.problem_key.like(f"{_UNDATED}%"))
            ).all()
            assert len(undated) == 3 and all(started <= t <= datetime.now(UTC) for t in undated)
            for way, variant_id in _WAYS.items():
                variants = session.scalars(
                    select(Measurement.variant_id)
                    .join(Toolchain, Toolchain.id == Measurement.toolchain_id)
                    .where(Toolchain.template_version == way)
                ).all()
                assert variants == [variant_id] * len(lines)
            revisions = session.scalars(select(BestConfig.revision)).all()
            assert len(revisions) == 3 * len(lines) and None not in revisions
    finally:
        engine.dispose()


def _timed(median: float) -> dict[str, Any]:
    return {"outcome": "ok", "median_us": median, "p20_us": median * 0.99,
            "p80_us": median * 1.01, "created_at": "2026-12-02T10:00:00"}  # fmt: skip


def test_a_key_another_writer_stores_meanwhile_goes_the_upsert_way(
    api: Any, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a chunk's read of the stored keys and its write, another import commits two of
    its keys: the chunk's insert skips them (on PostgreSQL: RETURNING leaves them out) and
    they are decided against the stored rows as any line of a stored key is."""
    lines = _lines(api)[:3]
    for line in lines:
        line["measurement"] = _timed(50.0)
    other = copy.deepcopy(lines[1:])
    for line, median in zip(other, (100.0, 10.0), strict=True):  # slower, faster
        line["variant"]["id"] = "f" * 64
        line["measurement"] = _timed(median)
    engine = make_engine(database_url)
    maker = make_sessionmaker(engine)
    prefetch = ImportMemo.prefetch
    writes: list[Any] = []

    def then_another_writer(memo: ImportMemo, session: Session, chunk: Any) -> None:
        prefetch(memo, session, chunk)
        if not writes:
            writes.append("once")
            with maker() as elsewhere:
                writes.append(import_lines(elsewhere, "\n".join(map(json.dumps, other))))
                elsewhere.commit()

    monkeypatch.setattr(ImportMemo, "prefetch", then_another_writer)
    try:
        with maker() as session:
            answer = import_lines(session, "\n".join(map(json.dumps, lines)))
            session.commit()
        assert writes[1].inserted == 2
        assert (answer.inserted, answer.replaced, answer.kept) == (1, 1, 1)
        with maker() as session:
            winners = dict(
                session.execute(
                    select(BestConfig.problem_key, Measurement.median_us).join(
                        Measurement, Measurement.id == BestConfig.measurement_id
                    )
                ).all()
            )
            assert len(session.scalars(select(Measurement.id)).all()) == 5  # all kept
        assert sorted(winners.values()) == [10.0, 50.0, 50.0]
    finally:
        engine.dispose()
