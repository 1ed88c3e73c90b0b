"""Answering "what is the best config for this problem on this device?".

Exact match first (one query on the unique key). Otherwise the nearest tuned problem of the
same op/dtype/layout/device: Euclidean distance between the log2 of the int dims; the non-int
fields (reduce ``kind``) must be equal. Per device only its newest toolchain answers unless a
``toolchain`` is asked for (matched against the toolchain key, compiler or template version).
Which devices and toolchains may answer, and which stored problems are nearest, come from the
in-memory index (:mod:`service.store.best_index`), so no lookup reads every row of a device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Engine,
    Integer,
    Row,
    Select,
    String,
    and_,
    any_,
    bindparam,
    func,
    join,
    select,
    tuple_,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.schemas.configs import BestConfigOut
from service.store.best_answer import AnswerParts, best_answer
from service.store.best_index import Snapshot, best_index_for, device_filter
from service.store.models import Artifact, BestConfig, Device, Measurement, Toolchain, Variant
from tuner.problems import Problem

__all__ = [
    "ANSWER_ROWS",
    "LookupQuery",
    "allowed_pairs",
    "answer_model",
    "find_devices",
    "find_best",
    "find_best_many",
    "log_distance",
    "rank_rows",
]


def find_devices(session: Session, device: str | None, backend: str | None) -> list[Device]:
    """Devices named by a product-name substring, a full key ``backend:name:arch:sm_count``
    or a backend's name (:func:`service.store.best_index.device_filter`)."""
    device, backend = device_filter(device, backend)
    query = select(Device).order_by(Device.id)
    if backend:
        query = query.where(Device.backend == backend)
    devices = list(session.scalars(query))
    if not device:
        return devices
    exact = [d for d in devices if d.key() == device]
    if exact:
        return exact
    return [d for d in devices if device.lower() in d.name.lower()]


def log_distance(a: dict[str, Any], b: dict[str, Any], int_dims: tuple[str, ...]) -> float | None:
    """Distance in log2 space over ``int_dims``; None when a non-int field differs."""
    for name in set(a) | set(b):
        if name not in int_dims and a.get(name) != b.get(name):
            return None
    total = 0.0
    for name in int_dims:
        x, y = a.get(name), b.get(name)
        if not isinstance(x, int) or not isinstance(y, int) or x < 1 or y < 1:
            if x != y:
                return None
            continue
        total += (math.log2(x) - math.log2(y)) ** 2
    return math.sqrt(total)


@dataclass(frozen=True)
class LookupQuery:
    """One validated lookup: what ``GET /v1/configs/best`` or one batch item asks."""

    op: str
    dtype: str
    layout: str
    problem: Problem
    device: str | None = None
    backend: str | None = None
    toolchain: str | None = None


# The statements are built once: building a SQLAlchemy expression per lookup cost more than
# running it (profile in docs/benchmarks/load.md). Plain columns, read on the Core path.
_COLUMNS = (
    BestConfig.id,
    BestConfig.op,
    BestConfig.dtype,
    BestConfig.layout,
    BestConfig.problem,
    BestConfig.problem_key,
    BestConfig.device_id,
    BestConfig.toolchain_id,
    BestConfig.updated_at,
    BestConfig.confirmed,
    BestConfig.tie_set,
    BestConfig.unmeasured,
    Variant.id.label("variant_id"),
    Variant.name.label("variant_name"),
    Variant.params,
    Measurement.median_us,
    Measurement.p20_us,
    Measurement.p80_us,
    Measurement.throughput,
    Measurement.throughput_unit,
    Measurement.energy_j,
    Measurement.created_at.label("measured_at"),
    Device.backend,
    Device.name.label("device_name"),
    Device.arch,
    Device.sm_count,
    Device.driver,
    Device.runtime,
    Device.memory_bytes,
    Toolchain.compiler,
    Toolchain.template_version,
    Toolchain.libraries,
    Toolchain.key.label("toolchain_key"),
    Artifact.sha256.label("artifact_sha256"),
    Artifact.size.label("artifact_size"),
)
_JOINED = (
    join(BestConfig, Measurement, Measurement.id == BestConfig.measurement_id)
    .join(Variant, Variant.id == Measurement.variant_id)
    .join(Device, Device.id == BestConfig.device_id)
    .join(Toolchain, Toolchain.id == BestConfig.toolchain_id)
)
# the winner's artifact for the answer's arch and toolchain: at most one row (its unique key),
# joined last (after the inner joins that choose the rows), so an answer costs no query of its own
_ARTIFACT_ON = and_(
    Artifact.variant_id == Measurement.variant_id,
    Artifact.arch == Device.arch,
    Artifact.toolchain_id == BestConfig.toolchain_id,
)
_ANSWER = select(*_COLUMNS).select_from(_JOINED.outerjoin(Artifact, _ARTIFACT_ON))
_PAIR = tuple_(BestConfig.device_id, BestConfig.toolchain_id)
_EXACT = _ANSWER.where(
    BestConfig.op == bindparam("op"),
    BestConfig.dtype == bindparam("dtype"),
    BestConfig.layout == bindparam("layout"),
    BestConfig.problem_key == bindparam("key"),
    _PAIR.in_(bindparam("pairs", expanding=True)),
)
_EXACT_MANY = _ANSWER.where(
    BestConfig.op.in_(bindparam("ops", expanding=True)),
    BestConfig.dtype.in_(bindparam("dtypes", expanding=True)),
    BestConfig.layout.in_(bindparam("layouts", expanding=True)),
    BestConfig.problem_key.in_(bindparam("keys", expanding=True)),
    _PAIR.in_(bindparam("pairs", expanding=True)),
)
_BY_ID = _ANSWER.where(BestConfig.id.in_(bindparam("ids", expanding=True)))
#: every answer row with its revision, for service.store.read_model
ANSWER_ROWS = select(*_COLUMNS, BestConfig.revision).select_from(
    _JOINED.outerjoin(Artifact, _ARTIFACT_ON)
)

# PostgreSQL's batch forms. The IN lists above left the planner probing the unique key by
# (op, dtype, layout, device, toolchain) and filtering problem_key over every row of the group
# (about 45 ms at 100,000 configs); joining the wanted keys as unnest()ed arrays probes the
# unique key once per wanted row, and the statement's text no longer depends on the batch's
# size (no per-batch rendering of 1,000 bind parameters).
_WANTED = (
    func.unnest(
        bindparam("w_ops", type_=ARRAY(String)),
        bindparam("w_dtypes", type_=ARRAY(String)),
        bindparam("w_layouts", type_=ARRAY(String)),
        bindparam("w_keys", type_=ARRAY(String)),
        bindparam("w_devices", type_=ARRAY(Integer)),
        bindparam("w_toolchains", type_=ARRAY(Integer)),
    )
    .table_valued("op", "dtype", "layout", "problem_key", "device_id", "toolchain_id")
    .render_derived(name="wanted")
)
_EXACT_MANY_PG = select(*_COLUMNS).select_from(
    _JOINED.join(
        _WANTED,
        and_(
            BestConfig.op == _WANTED.c.op,
            BestConfig.dtype == _WANTED.c.dtype,
            BestConfig.layout == _WANTED.c.layout,
            BestConfig.problem_key == _WANTED.c.problem_key,
            BestConfig.device_id == _WANTED.c.device_id,
            BestConfig.toolchain_id == _WANTED.c.toolchain_id,
        ),
    ).outerjoin(Artifact, _ARTIFACT_ON)
)
_BY_ID_PG = _ANSWER.where(BestConfig.id == any_(bindparam("ids", type_=ARRAY(Integer))))


def _rows(session: Session, statement: Select[Any], **params: Any) -> list[Row[Any]]:
    return list(session.connection().execute(statement, params))


def _not_found(query: LookupQuery) -> NotFound:
    where = (
        f" on {query.device}" if query.device else (f" on {query.backend}" if query.backend else "")
    )
    return NotFound(
        f"{query.op} {query.dtype} {query.layout} {query.problem.key()}{where} is not tuned "
        "yet, and no tuned problem of that op/dtype/layout/device is near it; submit a tuning job"
    )


def _no_pairs(query: LookupQuery, snapshot: Snapshot) -> NotFound:
    """Why no stored group may answer: a toolchain no result was measured with is said as
    such, with the toolchains that have results; else "not tuned yet"."""
    if query.toolchain is not None:
        devices = snapshot.device_ids(query.device, query.backend)
        present = snapshot.toolchain_keys(query.op, query.dtype, query.layout, devices)
        if present:
            shown = ", ".join(repr(key) for key in present[:5])
            more = f" and {len(present) - 5} more" if len(present) > 5 else ""
            return NotFound(
                f"no {query.op} {query.dtype} {query.layout} results under toolchain "
                f"{query.toolchain!r} (a toolchain is named by its key, compiler or template "
                f"version); results exist under {shown}{more}, or leave toolchain out for the "
                "newest"
            )
    return _not_found(query)


def _pairs(snapshot: Snapshot, query: LookupQuery) -> list[tuple[int, int]]:
    devices = snapshot.device_ids(query.device, query.backend)
    return snapshot.allowed(query.op, query.dtype, query.layout, devices, query.toolchain)


def allowed_pairs(snapshot: Snapshot, query: LookupQuery) -> list[tuple[int, int]]:
    """The (device_id, toolchain_id) groups that may answer ``query``."""
    return _pairs(snapshot, query)


def rank_rows(query: LookupQuery, rows: Sequence[Row[Any]], exact: bool) -> tuple[float, Any]:
    """The answering row of the candidates and its distance: closest first, then the most
    recently updated; NotFound when none is comparable. (The read model ranks with it too.)"""
    wanted = query.problem.dims()
    ranked: list[tuple[float, Row[Any]]] = []
    for row in rows:
        distance = 0.0 if exact else log_distance(wanted, row.problem, query.problem.dim_names)
        if distance is not None:
            ranked.append((distance, row))
    if not ranked:
        raise _not_found(query)
    ranked.sort(key=lambda c: (c[0], -c[1].updated_at.timestamp(), c[1].id))
    return ranked[0]


def answer_model(
    query: LookupQuery, rows: Sequence[Row[Any]], exact: bool, seen: AnswerParts | None = None
) -> BestConfigOut:
    """The answer from candidate rows (:func:`rank_rows`), as the full path builds it
    (``seen``: device and toolchain parts built before, kept for the next answers)."""
    return _answer(query, rows, exact, seen)


def _answer(
    query: LookupQuery, rows: Sequence[Row[Any]], exact: bool, seen: AnswerParts | None = None
) -> BestConfigOut:
    """The answer from candidate rows: closest first, then the most recently updated."""
    wanted = query.problem.dims()
    distance, row = rank_rows(query, rows, exact)
    return best_answer(
        query.op, query.dtype, query.layout, wanted, row, exact, distance, seen or AnswerParts()
    )


def find_best(
    session: Session,
    *,
    op: str,
    dtype: str,
    layout: str,
    problem: Problem,
    device: str | None = None,
    backend: str | None = None,
    toolchain: str | None = None,
) -> BestConfigOut:
    """The answer of ``GET /v1/configs/best``; raises NotFound when nothing fits.

    The exact answer is one query on the best configs' unique key; otherwise the in-memory
    index names the nearest rows and one query by id reads them."""
    query = LookupQuery(op, dtype, layout, problem, device, backend, toolchain)
    snapshot = best_index_for(_engine(session)).fresh(session)
    pairs = _pairs(snapshot, query)
    if not pairs:
        raise _no_pairs(query, snapshot)
    rows = _rows(session, _EXACT, op=op, dtype=dtype, layout=layout, key=problem.key(), pairs=pairs)
    if rows:
        return _answer(query, rows, exact=True)
    ids = snapshot.nearest(op, dtype, layout, pairs, problem.dims())
    if not ids:
        raise _not_found(query)
    rows = _rows(session, _BY_ID, ids=ids)
    return _answer(query, rows, exact=False)


def find_best_many(
    session: Session, queries: Sequence[LookupQuery]
) -> list[BestConfigOut | NotFound]:
    """Answers to many lookups, in order (a NotFound where nothing fits), in a constant
    number of statements: the index check, one query for every exact key and one by id for
    every nearest answer. A query asked more than once (a model's repeated layers) is
    answered once."""
    unique = list(dict.fromkeys(queries))
    if len(unique) < len(queries):
        answered = dict(zip(unique, _find_many(session, unique), strict=True))
        return [answered[q] for q in queries]
    return _find_many(session, queries)


def _find_many(session: Session, queries: Sequence[LookupQuery]) -> list[BestConfigOut | NotFound]:
    snapshot = best_index_for(_engine(session)).fresh(session)
    pairs = [_pairs(snapshot, q) for q in queries]
    keys = [q.problem.key() for q in queries]  # once each: the batch's per-problem work adds up
    wanted = {
        (q.op, q.dtype, q.layout, key, d, t)
        for q, key, allowed in zip(queries, keys, pairs, strict=True)
        for d, t in allowed
    }
    exact: dict[tuple[str, str, str, str], list[Row[Any]]] = {}
    postgresql = session.get_bind().dialect.name == "postgresql"
    if wanted and postgresql:
        columns = list(zip(*sorted(wanted), strict=True))
        names = ("w_ops", "w_dtypes", "w_layouts", "w_keys", "w_devices", "w_toolchains")
        rows = _rows(session, _EXACT_MANY_PG, **dict(zip(names, map(list, columns), strict=True)))
    elif wanted:
        rows = _rows(
            session,
            _EXACT_MANY,
            ops=sorted({w[0] for w in wanted}),
            dtypes=sorted({w[1] for w in wanted}),
            layouts=sorted({w[2] for w in wanted}),
            keys=sorted({w[3] for w in wanted}),
            pairs=sorted({(w[4], w[5]) for w in wanted}),
        )
    if wanted:
        for r in rows:
            if (r.op, r.dtype, r.layout, r.problem_key, r.device_id, r.toolchain_id) in wanted:
                exact.setdefault((r.op, r.dtype, r.layout, r.problem_key), []).append(r)
    exact_rows: list[list[Row[Any]]] = []
    near_ids: list[list[int]] = []
    for query, key, allowed in zip(queries, keys, pairs, strict=True):
        candidates = exact.get((query.op, query.dtype, query.layout, key), [])
        chosen = [r for r in candidates if (r.device_id, r.toolchain_id) in allowed]
        exact_rows.append(chosen)
        near_ids.append(
            []
            if chosen or not allowed
            else snapshot.nearest(
                query.op, query.dtype, query.layout, allowed, query.problem.dims()
            )
        )
    by_id: dict[int, Row[Any]] = {}
    all_ids = {i for ids in near_ids for i in ids}
    if all_ids:
        statement = _BY_ID_PG if postgresql else _BY_ID
        by_id = {row.id: row for row in _rows(session, statement, ids=sorted(all_ids))}
    answers: list[BestConfigOut | NotFound] = []
    seen = AnswerParts()
    for query, allowed, chosen, ids in zip(queries, pairs, exact_rows, near_ids, strict=True):
        if not allowed:
            answers.append(_no_pairs(query, snapshot))
            continue
        try:
            if chosen:
                answers.append(_answer(query, chosen, exact=True, seen=seen))
            else:
                near = [by_id[i] for i in ids if i in by_id]
                answers.append(_answer(query, near, exact=False, seen=seen))
        except NotFound as exc:
            answers.append(exc)
    return answers


def _engine(session: Session) -> Engine:
    bind = session.get_bind()
    return bind if isinstance(bind, Engine) else bind.engine
