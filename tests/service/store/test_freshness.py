"""The change signal behind the cached lookups (service.store.freshness): a commit from another
connection moves it on both databases; on PostgreSQL only this database's tunehub writes count,
a write still in flight is never trusted, and writers never wait on each other for it."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from service.store.db import make_engine, upgrade
from service.store.freshness import CHANGE_LOCK_KEY, CHANGE_SEQUENCE, ChangeSignal
from tests.conftest import _pg_create, _pg_drop, _pg_url, _unique
from tests.service.api.test_fastpath import EXACT, _seed, _statements
from tests.service.store.test_lookup_index import H200, NEW_TC, _store

REPO = Path(__file__).resolve().parents[3]
POSTGRESQL_ONLY = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def _connect(url: str) -> psycopg.Connection:
    """A plain driver connection (not autocommit): a second writer, as another process has."""
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(conninfo, connect_timeout=10)


def _commit_a_best_config(url: str, name: str) -> None:
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            _store(session, "gemm", {"m": 256, "n": 256, "k": 256}, 1.0, H200, NEW_TC, name)
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture
def signal(database_url: str) -> Iterator[ChangeSignal]:
    watcher = ChangeSignal(database_url)
    try:
        yield watcher
    finally:
        watcher.close()


@pytest.fixture
def other_database() -> Iterator[str]:
    """A second migrated PostgreSQL database on the same server (another team's service)."""
    name = _unique("tunehub_test")
    _pg_create(name)
    try:
        upgrade(_pg_url(name))
        yield _pg_url(name)
    finally:
        _pg_drop(name)


def test_the_migration_and_the_signal_name_the_same_sequence_and_lock() -> None:
    path = REPO / "migrations" / "versions" / "0006_change_signal.py"
    spec = importlib.util.spec_from_file_location("migration_0006", path)
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    assert (migration.SEQUENCE, migration.LOCK_KEY) == (CHANGE_SEQUENCE, CHANGE_LOCK_KEY)


def test_a_commit_from_another_connection_moves_the_signal(
    database_url: str, signal: ChangeSignal
) -> None:
    before = signal.current()
    assert signal.current() == before  # nothing written: steady
    _commit_a_best_config(database_url, "a")
    after = signal.current()
    assert after != before
    assert signal.current() == after


@POSTGRESQL_ONLY
def test_a_write_in_flight_is_never_trusted_and_its_commit_moves_the_signal(
    database_url: str, signal: ChangeSignal
) -> None:
    before = signal.current()
    with _connect(database_url) as writer:
        writer.execute("UPDATE best_configs SET confirmed = confirmed WHERE false")
        # bumped before commit: a token read now must equal no other, or an answer read
        # before the commit would be kept under the value that the commit leaves behind
        first, second = signal.current(), signal.current()
        assert first != second and before not in (first, second)
        writer.commit()
    after = signal.current()
    assert after != before and signal.current() == after


@POSTGRESQL_ONLY
def test_writers_never_wait_on_each_other_for_the_signal(
    database_url: str, signal: ChangeSignal
) -> None:
    before = signal.current()
    with _connect(database_url) as first, _connect(database_url) as second:
        first.execute("UPDATE best_configs SET confirmed = confirmed WHERE false")
        second.execute("SET lock_timeout = '5s'")  # a wait on the first writer fails here
        second.execute("UPDATE api_tokens SET revoked = revoked WHERE false")
        second.commit()
        first.commit()
    assert signal.current() != before


@POSTGRESQL_ONLY
def test_writes_to_another_database_leave_the_signal_alone(
    database_url: str, signal: ChangeSignal, other_database: str
) -> None:
    before = signal.current()
    _commit_a_best_config(other_database, "elsewhere")
    with _connect(other_database) as writer:  # in flight there, with the same lock key
        writer.execute("UPDATE best_configs SET confirmed = confirmed WHERE false")
        assert signal.current() == before
        writer.rollback()
    assert signal.current() == before


@POSTGRESQL_ONLY
def test_a_lookup_after_another_databases_write_is_still_a_cache_hit(
    api: Any, other_database: str
) -> None:
    _seed(api)
    assert api.best(**EXACT).status_code == 200  # kept
    _commit_a_best_config(other_database, "elsewhere")
    with _statements(api) as seen:
        answer = api.best(**EXACT)
    assert answer.status_code == 200 and answer.json()["variant_name"] == "a"
    assert not seen  # replayed from the cache: the other database's write did not empty it


@POSTGRESQL_ONLY
def test_rows_no_answer_reaches_yet_leave_the_signal_alone(
    database_url: str, signal: ChangeSignal
) -> None:
    _commit_a_best_config(database_url, "a")
    before = signal.current()
    with _connect(database_url) as writer:  # what an upload writes before its winner, if any
        writer.execute(
            "INSERT INTO variants (id, op, name, params) VALUES ('sha-new', 'gemm', 'new', '{}')"
        )
        writer.commit()
    assert signal.current() == before
    with _connect(database_url) as writer:  # an answer's variant changed: counted
        writer.execute("UPDATE variants SET params = '{\"x\": 1}' WHERE id = 'sha-new'")
        writer.commit()
    assert signal.current() != before
