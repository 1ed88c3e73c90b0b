"""A cheap signal that the database changed, seen across processes.

    signal = ChangeSignal(url)
    token = signal.current()    # equal tokens: no write was committed in between
    signal.close()

Read on a dedicated raw driver connection (no SQLAlchemy machinery: the check runs on every
cached lookup and must cost microseconds):

- SQLite: ``PRAGMA data_version``, which changes whenever another connection (of this
  process or any other) commits to the file. This connection never writes, so every commit
  anywhere is seen.
- PostgreSQL: the sequence ``tunehub_change_seq``, which statement-level triggers on the
  tables a lookup reads bump (migration 0006), so only writes to this database's tunehub
  tables count (the server-wide ``pg_current_snapshot()`` used before moved on every other
  database's writes too). A trigger bumps before its transaction commits, so it also holds a
  shared transaction-level advisory lock until commit; the one query here tries that lock
  exclusively (never waiting) and reads the value. Held by a writer: the value may count a
  write not yet visible, so the token is a fresh object equal to nothing (nothing is kept
  until the writer ends). Free: every bump counted belongs to a finished transaction, and
  any later write bumps again before it can commit. Held, the same statement also reads the
  revisions of the best configs visible above a floor the caller gives (its snapshot was taken
  after the query was sent), so a caller can tell whether a commit it has not seen finished
  meanwhile, without a second round trip (:class:`Unsettled`'s ``visible``).

A token says "something may have changed", never what: callers drop everything they derived.

:meth:`ChangeSignal.current_async` is the same query for an event loop: a second raw libpq
connection (a prepared statement, text results, no psycopg cursor) in nonblocking mode, whose
socket the loop watches, so the loop serves other requests while PostgreSQL answers. One query
at a time per loop: callers share its answer (:mod:`service.store.read_model` says how).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["CHANGE_LOCK_KEY", "CHANGE_SEQUENCE", "CONNECT_TIMEOUT_S", "ChangeSignal", "Unsettled"]

_SQLITE_QUERY = "PRAGMA data_version"
#: the sequence and the advisory lock key of migration 0006 (its own copies; a test checks
#: they agree)
CHANGE_SEQUENCE = "tunehub_change_seq"
CHANGE_LOCK_KEY = 8391734862498062881  # b"tunehub!" as a big-endian int64
#: the value first, then the lock (a value read before the lock was free counts only finished
#: writers); only when the lock is held, the revisions visible above the floor (the parameter)
_PG_QUERY = (
    "SELECT last_value, CASE WHEN pg_try_advisory_xact_lock({key}) THEN NULL ELSE"
    " (SELECT coalesce(string_agg(revision::text, ','), '') FROM best_configs"
    " WHERE revision > {floor}) END FROM {sequence}"
)
_PG_SYNC = _PG_QUERY.format(key=CHANGE_LOCK_KEY, floor="%s", sequence=CHANGE_SEQUENCE)
_PG_PREPARED = _PG_QUERY.format(key=CHANGE_LOCK_KEY, floor="$1", sequence=CHANGE_SEQUENCE)
_STATEMENT = b"tunehub_change_signal"
#: seconds to wait for a PostgreSQL connection before the lookup goes to the route instead
CONNECT_TIMEOUT_S = 2


class Unsettled:
    """A token read while a writer was in flight: equal to no other token; ``value`` is the
    sequence as read (it may count writes not yet visible); ``visible`` the revisions of the
    best configs above the caller's floor in a snapshot taken after the query was sent (every
    commit finished before it is there)."""

    __slots__ = ("value", "visible")

    def __init__(self, value: int, visible: frozenset[int] = frozenset()) -> None:
        self.value = value
        self.visible = visible


def _pg_token(value: int, visible: str | None) -> object:
    """The token of one row of the query: the value (settled) or an Unsettled."""
    if visible is None:
        return value
    return Unsettled(
        value, frozenset(int(r) for r in visible.split(",")) if visible else frozenset()
    )


class ChangeSignal:
    """One lazily opened connection per process; thread-safe (a lock around the one query)."""

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self.is_sqlite = self._url.get_backend_name() == "sqlite"
        self._connection: Any = None
        self._lock = threading.Lock()
        # current_async's raw connection and the loop it serves
        self._pgconn: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _connect(self) -> Any:
        if self.is_sqlite:
            # autocommit (isolation_level=None): a PRAGMA read must never hold a transaction
            return sqlite3.connect(
                self._url.database or ":memory:", check_same_thread=False, isolation_level=None
            )
        import psycopg  # only where PostgreSQL is used

        conninfo = self._url.set(drivername="postgresql").render_as_string(hide_password=False)
        # autocommit: the query's advisory lock ends with it, and no transaction stays open; a
        # short connect timeout, since a lookup waits for it (then the route answers)
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)

    def current(self, floor: int = -1) -> object:
        """A token that changes whenever a write was committed since the last one (on
        PostgreSQL, while a tunehub write is in flight, an :class:`Unsettled` equal to no
        other, with the revisions visible above ``floor``)."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            try:
                if self.is_sqlite:
                    row = self._connection.execute(_SQLITE_QUERY).fetchone()
                else:
                    row = self._connection.execute(_PG_SYNC, (floor,)).fetchone()
            except Exception:
                # a broken connection (server restart): reopen on the next call, fail this one
                self._close_locked()
                raise
        if self.is_sqlite:
            return row[0]
        return _pg_token(*row)

    async def current_async(self, floor: int = -1) -> object:
        """:meth:`current` without holding the event loop while PostgreSQL answers (SQLite's
        PRAGMA waits on no server: it runs as it is). Not reentrant: one call at a time per
        loop, which the caller ensures."""
        if self.is_sqlite:
            return self.current(floor)
        loop = asyncio.get_running_loop()
        if self._pgconn is None or self._loop is not loop:
            self._close_async()  # another loop (a test client's): its connection goes
            self._pgconn, self._loop = self._connect_raw(), loop
        pgconn = self._pgconn
        try:
            pgconn.send_query_prepared(_STATEMENT, [str(floor).encode()])
            while pgconn.flush():  # a tiny query: sent at once unless the socket is full
                await _ready(loop, pgconn.socket, write=True)
            result = await _result(loop, pgconn)
        except BaseException:
            # broken, or cancelled mid-query: reopen on the next call, fail this one
            self._close_async()
            raise
        value, visible = result.get_value(0, 0), result.get_value(0, 1)
        return _pg_token(int(value), None if visible is None else visible.decode())

    def _connect_raw(self) -> Any:
        """A libpq connection for current_async: connected (blocking, once), the query
        prepared, then nonblocking."""
        import psycopg
        from psycopg import pq
        from psycopg.conninfo import make_conninfo

        url = self._url.set(drivername="postgresql").render_as_string(hide_password=False)
        pgconn = pq.PGconn.connect(make_conninfo(url, connect_timeout=CONNECT_TIMEOUT_S).encode())
        if pgconn.status != pq.ConnStatus.OK:
            message = pgconn.get_error_message()
            pgconn.finish()
            raise psycopg.OperationalError(message)
        prepared = pgconn.prepare(_STATEMENT, _PG_PREPARED.encode())
        if prepared.status != pq.ExecStatus.COMMAND_OK:
            message = pgconn.get_error_message()
            pgconn.finish()
            raise psycopg.OperationalError(message)
        pgconn.nonblocking = 1
        return pgconn

    def close(self) -> None:
        with self._lock:
            self._close_locked()
        self._close_async()

    def _close_async(self) -> None:
        if self._pgconn is not None:
            try:
                self._pgconn.finish()
            finally:
                self._pgconn = self._loop = None

    def _close_locked(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, write: bool = False) -> None:
    """Wait until ``fd`` can be read (or written)."""
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def _result(loop: asyncio.AbstractEventLoop, pgconn: Any) -> Any:
    """The one row the prepared query answers, read as the socket delivers it."""
    from psycopg import OperationalError, pq

    results: list[Any] = []
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                if len(results) != 1 or results[0].status != pq.ExecStatus.TUPLES_OK:
                    error = results[-1].get_error_message() if results else b""
                    raise OperationalError(error.decode(errors="replace") or "no answer")
                return results[0]
            results.append(result)
        await _ready(loop, pgconn.socket)
