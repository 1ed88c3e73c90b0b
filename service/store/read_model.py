"""The lookups' read model: every best config's answer held in memory, kept fresh by revision.

    model = ReadModel(engine, signal, staleness_ms=0)
    answer = model.answer(query)   # (body bytes, ETag) or None: the full path answers

A build farm asks for many distinct shapes, so replaying kept answers
(:mod:`service.api.fastpath`) does not help them; running the full path costs about 1 ms
of CPU per lookup (FastAPI's solver, a session, SQLAlchemy's execution, pydantic's
validation). The read model answers them from memory instead:

- one query loads every answer row (:data:`service.store.lookup.ANSWER_ROWS`) into a map
  keyed by the best configs' unique key; the nearest-shape index is the same
  :class:`service.store.best_index.Snapshot` the full path uses (``extend_snapshot``);
- each row's answer is encoded once, by the full path's own validation and serialization;
  an answer splices the query's fields (``problem``, ``exact``, ``distance``) in front of the
  row's encoded rest, with pydantic-core's encoder, so its bytes (and ETag) are the full
  path's; a row whose encoding does not split that way is never answered from here;
- freshness: every write that changes an answer stamps the row with a new ``revision``
  (triggers of migration 0010). A lookup reads the database's change signal
  (:class:`service.store.freshness.ChangeSignal`: one ``PRAGMA data_version`` on SQLite, one
  query on PostgreSQL); when it moved, the rows with a newer revision are loaded (usually
  one). On PostgreSQL a value read while a writer is in flight is not trusted (revisions can
  commit out of order): the known revision stays, and the same query's snapshot says which
  revisions above it are visible; only when one of them is not loaded yet are the rows above
  the known revision loaded again, so every commit finished before the lookup is answered and
  a writer in flight costs no query per lookup.
- one check serves many lookups (:meth:`ReadModel.check_async`, the event loop's way): a
  lookup waits for a check that was sent after it arrived (a check already in flight may have
  read the database before the lookup's client saw its own commit, so it does not count),
  and every lookup that arrived while one check was in flight shares the next. The guarantee
  is the same as one check per lookup (no answer older than a commit that finished before
  the lookup arrived); the round trips per second are bounded by the round-trip time, not
  by the lookups, and the loop serves other requests while PostgreSQL answers.
- ``TUNEHUB_LOOKUP_STALENESS_MS`` > 0 skips the signal for that long after a check, so a
  lookup may answer up to that many milliseconds behind a commit; 0 (the default) checks it
  for every lookup as above.

Anything the model cannot answer exactly as the full path would (no group may answer: a 404
with its explanation; a model not loaded yet; an unsettled signal) returns None.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json
from sqlalchemy import Engine, Row
from sqlalchemy.orm import Session

from service.errors import NotFound
from service.store.best_answer import AnswerParts
from service.store.best_index import Snapshot, extend_snapshot
from service.store.freshness import ChangeSignal, Unsettled
from service.store.lookup import ANSWER_ROWS, LookupQuery, allowed_pairs, answer_model, rank_rows
from service.store.models import BestConfig
from tuner.problems import PROBLEM_TYPES

__all__ = ["ReadModel"]

ExactKey = tuple[str, str, str, str, int, int]


_HEAD = b'{"op":%s,"dtype":%s,"layout":%s,"problem":%s,"tuned_problem":%s,"exact":%s'
_DISTANCE = b',"distance":%s'


def _head(
    op: str, dtype: str, layout: str, problem: Any, tuned: Any, exact: bool, distance: float
) -> bytes:
    """The answer's first fields as BestConfigOut encodes them (its field order)."""
    fields = (to_json(op), to_json(dtype), to_json(layout), to_json(problem), to_json(tuned))
    return _HEAD % (*fields, b"true" if exact else b"false") + _DISTANCE % to_json(distance)


class ReadModel:
    """One process's answers of one database. Thread-safe: refreshes are serialized, and an
    answer reads one consistent state (the state is replaced whole, never mutated)."""

    def __init__(self, engine: Engine, signal: ChangeSignal, staleness_ms: int = 0) -> None:
        self._engine = engine
        self._signal = signal
        self._sqlite = self.is_sqlite = signal.is_sqlite
        self._staleness = staleness_ms / 1000.0
        self._lock = threading.Lock()
        self._state: _State | None = None  # None until the first load
        self._version: object = None
        self._usable = False
        self._checked_at = float("-inf")
        # check_async's lookups waiting for the next check, and whether one is running
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: list[asyncio.Future[object]] = []
        self._checking = False
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps weak references
        #: how many times rows were read from the database, and check_async's signal reads
        #: (tests watch them)
        self.loads = 0
        self.checks = 0

    def check(self) -> object:
        """Bring the model up to date with the database (at most every staleness) and return
        the change signal's value it holds (on PostgreSQL, while a writer is in flight, a
        value equal to nothing; the model answers as of every commit visible then). Raises
        when the database is unreachable."""
        now = time.monotonic()
        if self._usable and now - self._checked_at < self._staleness:
            return self._version
        return self._apply(self._signal.current(self._floor()), now)

    async def check_async(self) -> object:
        """:meth:`check` for the event loop: on PostgreSQL the lookup waits (without holding
        the loop) for the first check sent after it arrived, shared with every lookup that
        arrived before that check was sent."""
        now = time.monotonic()
        if self._sqlite or (self._usable and now - self._checked_at < self._staleness):
            return self.check()
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # another loop (a test client's): start over
            self._loop, self._waiting, self._checking = loop, [], False
        waiter: asyncio.Future[object] = loop.create_future()
        self._waiting.append(waiter)
        if not self._checking:
            self._checking = True
            self._task = loop.create_task(self._run_checks())
        return await waiter

    async def _run_checks(self) -> None:
        """Checks back to back while lookups wait: each serves the lookups that arrived
        before it was sent (taken from the queue first), never one that arrived after."""
        try:
            while self._waiting:
                served, self._waiting = self._waiting, []
                self.checks += 1
                try:
                    now = time.monotonic()
                    token = await self._signal.current_async(self._floor())
                    version = self._apply(token, now)
                except Exception as error:
                    for waiter in served:
                        if not waiter.done():
                            waiter.set_exception(error)
                else:
                    for waiter in served:
                        if not waiter.done():
                            waiter.set_result(version)
        finally:
            self._checking = False

    def _floor(self) -> int:
        state = self._state
        return state.revision if state is not None else -1

    def _apply(self, version: object, now: float) -> object:
        """Take in one reading of the change signal, taken at ``now`` or later."""
        with self._lock:
            if isinstance(version, Unsettled):
                # a writer is in flight: its revisions may commit out of order, so the known
                # revision stays; rows committed since are loaded all the same, unless every
                # revision visible above it is loaded already
                if self._state is None or not version.visible <= self._state.above:
                    self._state = self._load(self._state, None)
                self._usable = True
                # within the staleness the catch-up stands
                self._checked_at = now
                return version
            if self._state is None or version != self._version:
                self._state = self._load(self._state, version)
                self._version = version
            self._checked_at = now
            self._usable = True
        return version

    def answer(self, query: LookupQuery) -> bytes | None:
        """The body ``GET /v1/configs/best`` answers ``query`` with (the same bytes) as of the
        last :meth:`check`, or None: the full path answers."""
        state = self._state
        if state is None or not self._usable:
            return None
        return state.answer(query)

    def _load(self, old: _State | None, version: object) -> _State:
        """``old`` with the rows stamped after its revision. Its revision moves to the newest
        loaded (SQLite: one writer, so revisions commit in order), to the settled signal
        (PostgreSQL: every revision up to it is committed, later ones may be not), or stays
        (``version`` None: a writer in flight)."""
        known = old.revision if old is not None else -1
        with Session(self._engine) as session:
            rows = session.execute(ANSWER_ROWS.where(BestConfig.revision > known)).all()
            self.loads += 1
            state = old or _State()
            state.extend(session, rows)
        if self._sqlite:
            state.revision = max([known, *(row.revision or 0 for row in rows)])
        elif isinstance(version, int):
            state.revision = max(known, version)
        # every visible revision above the known one was just loaded (the rows above it)
        state.above = frozenset(r.revision for r in rows if (r.revision or 0) > state.revision)
        return state


class _State:
    """The answers at one revision: rows by id, ids by exact key, the nearest index, and each
    row's encoded answer after its leading fields (None: not encodable by splicing)."""

    def __init__(self) -> None:
        self.revision = -1
        #: the revisions above ``revision`` that the last load took in (PostgreSQL)
        self.above: frozenset[int] = frozenset()
        self.rows: dict[int, Row[Any]] = {}
        self.exact: dict[ExactKey, int] = {}
        self.snapshot = Snapshot()
        self.tails: dict[int, tuple[int | None, bytes | None]] = {}
        #: the device and toolchain parts of the answers encoded so far (built once each)
        self.parts = AnswerParts()

    def extend(self, session: Session, rows: Sequence[Row[Any]]) -> None:
        """Take in ``rows`` (new or changed answers). Called under the model's lock; a lookup
        on another thread meanwhile reads either a row's old or its new answer (single dict
        stores), and the nearest index is replaced whole."""
        added = [r for r in rows if r.id not in self.rows]
        for row in rows:
            key = (row.op, row.dtype, row.layout, row.problem_key, row.device_id, row.toolchain_id)
            self.rows[row.id] = row
            self.exact[key] = row.id
        if added:
            new_max = max(r.id for r in added)
            self.snapshot = extend_snapshot(session, self.snapshot, added, new_max)

    def _tail(self, row: Row[Any]) -> bytes | None:
        kept = self.tails.get(row.id)
        if kept is not None and kept[0] == row.revision:
            return kept[1]
        tail: bytes | None = None
        try:
            problem = PROBLEM_TYPES[row.op](**row.problem)
            query = LookupQuery(row.op, row.dtype, row.layout, problem)
            body = answer_model(query, [row], True, self.parts).model_dump_json().encode()
            head = _head(row.op, row.dtype, row.layout, problem.dims(), row.problem, True, 0.0)
            tail = body[len(head) :] if body.startswith(head) else None
        except Exception:  # a row the full path would answer otherwise: leave it to it
            tail = None
        self.tails[row.id] = (row.revision, tail)  # keyed by revision: never a stale one
        return tail

    def answer(self, query: LookupQuery) -> bytes | None:
        pairs = allowed_pairs(self.snapshot, query)
        if not pairs:
            return None
        key = query.problem.key()
        rows = [
            self.rows[i]
            for d, t in pairs
            if (i := self.exact.get((query.op, query.dtype, query.layout, key, d, t))) is not None
        ]
        exact = bool(rows)
        if not exact:
            ids = self.snapshot.nearest(
                query.op, query.dtype, query.layout, pairs, query.problem.dims()
            )
            rows = [self.rows[i] for i in ids if i in self.rows]
            if not rows:
                return None
        try:
            distance, row = rank_rows(query, rows, exact)
        except NotFound:
            return None
        tail = self._tail(row)
        if tail is None:
            return None
        return (
            _head(
                query.op,
                query.dtype,
                query.layout,
                query.problem.dims(),
                row.problem,
                exact,
                round(distance, 6),
            )
            + tail
        )
