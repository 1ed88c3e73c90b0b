"""Engines, sessions and migrations.

engine = make_engine(url)           SQLite gets foreign keys, a busy timeout and WAL
upgrade(url) / downgrade(url, rev)  what ``tunehub db upgrade`` runs (Alembic)
current_revision(url)               None on an empty database
check_revision(engine)              raises DatabaseNotMigrated unless at head
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service.errors import DatabaseNotMigrated
from service.schemas import text

__all__ = [
    "make_engine",
    "make_sessionmaker",
    "alembic_config",
    "head_revision",
    "current_revision",
    "upgrade",
    "downgrade",
    "check_revision",
]

log = logging.getLogger(__name__)

_ROOT = Path(__file__).resolve().parents[2]

# POOL_NOTE: a sync route holds its session's connection until the request ends, and FastAPI
# needs a worker thread (40 of them) after the route body to validate the response; with
# SQLAlchemy's default 5 + 10 connections, 64 concurrent job submissions left every thread
# waiting for a connection held by requests waiting for a thread, until the 30 s pool timeout
# (500s; bench/load.py). So the pool outgrows the thread count: unbounded on SQLite, 10 + 35
# on PostgreSQL (two API processes stay under its default of 100 connections).
SQLITE_POOL_SIZE = 20
PG_POOL_SIZE = 10
PG_MAX_OVERFLOW = 35


def make_engine(url: str) -> Engine:
    """An engine for ``url``; creates the parent dir of a SQLite file on first use."""
    parsed = make_url(url)
    # JSON columns written before the text rule may hold escaped lone surrogates: read them as
    # U+FFFD, so that every answer built from them can be sent (service.schemas.text)
    kwargs: dict[str, Any] = {"future": True, "json_deserializer": text.loads}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            # a file connection is cheap, so never make a request wait for one (see POOL_NOTE)
            kwargs.update(pool_size=SQLITE_POOL_SIZE, max_overflow=-1)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        kwargs.update(pool_pre_ping=True, pool_size=PG_POOL_SIZE, max_overflow=PG_MAX_OVERFLOW)
    engine = create_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


#: WAL lets lookups read while a worker's upload writes (no reader ever waits on the write
#: lock); synchronous=NORMAL is durable across a process crash in WAL mode and skips an fsync
#: per commit; a larger page cache and memory-mapped reads keep a big best_configs table hot.
SQLITE_PRAGMAS = (
    "PRAGMA foreign_keys=ON",
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA cache_size=-32000",
    "PRAGMA mmap_size=268435456",
    "PRAGMA temp_store=MEMORY",
)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    """Alembic config pointing at this repository's migrations and at ``url``."""
    config = Config(str(_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    log.info("migrating %s to %s", make_url(url).render_as_string(hide_password=True), revision)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    log.info("downgrading %s to %s", make_url(url).render_as_string(hide_password=True), revision)
    command.downgrade(alembic_config(url), revision)


def check_revision(engine: Engine) -> str:
    """The database's revision; raises :class:`DatabaseNotMigrated` unless it is the head."""
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    head = head_revision()
    if current != head:
        where = engine.url.render_as_string(hide_password=True)
        state = "not migrated (empty)" if current is None else f"at revision {current}"
        raise DatabaseNotMigrated(
            f"database {where} is {state}, but this version of tunehub needs revision {head}; "
            "run `tunehub db upgrade` (or set TUNEHUB_MIGRATE_ON_START=1)"
        )
    return current or ""
