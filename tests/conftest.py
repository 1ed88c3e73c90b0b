"""Shared fixtures: migrated databases (SQLite and the real PostgreSQL) and an API client.

PostgreSQL is never skipped: it must answer at TUNEHUB_TEST_PG_URL (default
postgresql+psycopg://postgres@127.0.0.1:5432/postgres). A uniquely named database is created
and migrated once per session (dropped at the end) and emptied before each test; SQLite tests
get a copy of a file migrated once per session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.settings import Settings, get_settings
from service.store.db import upgrade
from service.store.models import Base
from service.store.tokens import create_token

PG_ADMIN_URL = os.environ.get(
    "TUNEHUB_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DATABASE_KINDS = ("sqlite", "postgresql")


REPO_ROOT = Path(__file__).resolve().parents[1]


def spawn_cli(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m service.cli <args>`` in the background from the repository root, its
    stdout and stderr written to ``log`` (tests that start real servers and workers)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", *args],
            env=env,
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def pg_admin_connect() -> psycopg.Connection:
    """An autocommit connection to the admin database (creates and drops the test databases);
    the test fails, with the URL, when PostgreSQL is unreachable."""
    url = make_url(PG_ADMIN_URL)
    try:
        return psycopg.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 5432,
            user=url.username or "postgres",
            password=url.password,
            dbname=url.database or "postgres",
            autocommit=True,
            connect_timeout=10,
        )
    except psycopg.OperationalError as exc:
        pytest.fail(
            f"PostgreSQL is required for the service tests and is unreachable at "
            f"{PG_ADMIN_URL}: {exc}",
            pytrace=False,
        )


def _pg_url(name: str) -> str:
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _pg_create(name: str) -> None:
    with pg_admin_connect() as connection:
        connection.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]


def _pg_drop(name: str) -> None:
    with pg_admin_connect() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session", autouse=True)
def _home_dirs_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Nothing the suite runs writes to the user's own dirs (``~/.cache/tunehub``,
    ``~/.local/share/tunehub``): the default data and cache dirs, in this process and in the
    servers and CLIs tests start (those that drop the TUNEHUB_ variables too: XDG_*), are
    under the session's temp dir. A test that wants a dir still names its own."""
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home / "cache"))
        patch.setenv("XDG_DATA_HOME", str(home / "data"))
        patch.setenv("TUNEHUB_CACHE_DIR", str(home / "cache" / "tunehub"))
        patch.setenv("TUNEHUB_DATA_DIR", str(home / "data" / "tunehub"))
        get_settings.cache_clear()
        yield home
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "tunehub.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def _pg_database() -> Iterator[str]:
    name = _unique("tunehub_test")
    _pg_create(name)
    try:
        upgrade(_pg_url(name))
        yield name
    finally:
        _pg_drop(name)


def _pg_empty(name: str) -> None:
    """Delete every row, children first (far faster than TRUNCATE or a database per test)."""
    url = make_url(_pg_url(name))
    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password,
        dbname=name,
        autocommit=True,
        connect_timeout=10,
    ) as connection:
        connection.execute("SET lock_timeout = '20s'")
        with connection.transaction():
            for table in reversed(Base.metadata.sorted_tables):
                connection.execute(f'DELETE FROM "{table.name}"')  # type: ignore[arg-type]


@pytest.fixture(params=DATABASE_KINDS)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty (unmigrated) database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = _unique("tunehub_test")
    _pg_create(name)
    try:
        yield _pg_url(name)
    finally:
        _pg_drop(name)


@pytest.fixture(params=DATABASE_KINDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of each kind, private to the test."""
    if request.param == "sqlite":
        path = tmp_path / "tunehub.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    name = request.getfixturevalue("_pg_database")
    _pg_empty(name)
    yield _pg_url(name)


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    return Settings(
        database_url=database_url,
        data_dir=tmp_path / "data",
        cache_dir=tmp_path / "cache",
        local_worker=False,
        lease_seconds=60,
        # the API tests upload synthetic variants ("sha-a", {"pack": 4, "name": "a"});
        # tests/service/api/test_trust.py checks real ones with verification on
        verify_variants=False,
    )


@dataclass
class ApiHarness:
    """A TestClient over a fresh migrated database, with one token per scope."""

    client: TestClient
    sessionmaker: sessionmaker[Session]
    admin: dict[str, str]
    worker: dict[str, str]
    submit: dict[str, str]
    read: dict[str, str]
    tokens: dict[str, str]


@pytest.fixture
def app_client(settings: Settings) -> Iterator[ApiHarness]:
    app = create_app(settings)
    maker: sessionmaker[Session] = app.state.sessionmaker
    tokens: dict[str, str] = {}
    with maker() as session:
        for scope in ("admin", "worker", "submit", "read"):
            tokens[scope] = create_token(session, f"test-{scope}", [scope])
        session.commit()
    with TestClient(app) as client:
        headers = {scope: {"Authorization": f"Bearer {t}"} for scope, t in tokens.items()}
        yield ApiHarness(
            client=client,
            sessionmaker=maker,
            admin=headers["admin"],
            worker=headers["worker"],
            submit=headers["submit"],
            read=headers["read"],
            tokens=tokens,
        )
