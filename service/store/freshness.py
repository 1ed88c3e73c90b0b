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
  any later write bumps again before it can commit.

A token says "something may have changed", never what: callers drop everything they derived.
"""

from __future__ import annotations

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
_PG_QUERY = (
    f"SELECT pg_try_advisory_xact_lock({CHANGE_LOCK_KEY}), last_value FROM {CHANGE_SEQUENCE}"
)
#: seconds to wait for a PostgreSQL connection before the lookup goes to the route instead
CONNECT_TIMEOUT_S = 2


class Unsettled:
    """A token read while a writer was in flight: equal to no other token; ``value`` is the
    sequence as read (it may count writes not yet visible)."""

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = value


class ChangeSignal:
    """One lazily opened connection per process; thread-safe (a lock around the one query)."""

    def __init__(self, url: str) -> None:
        self._url = make_url(url)
        self.is_sqlite = self._url.get_backend_name() == "sqlite"
        self._connection: Any = None
        self._lock = threading.Lock()

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

    def current(self) -> object:
        """A token that changes whenever a write was committed since the last one (on
        PostgreSQL, while a tunehub write is in flight, a token equal to no other)."""
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            try:
                row = self._connection.execute(
                    _SQLITE_QUERY if self.is_sqlite else _PG_QUERY
                ).fetchone()
            except Exception:
                # a broken connection (server restart): reopen on the next call, fail this one
                self._close_locked()
                raise
        if self.is_sqlite:
            return row[0]
        settled, value = row
        # a writer in flight: its bump may be counted before its rows are visible
        return value if settled else Unsettled(value)

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            finally:
                self._connection = None
