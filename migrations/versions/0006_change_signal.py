"""PostgreSQL change signal local to tunehub's tables: a sequence bumped by statement-level
triggers, read by :class:`service.store.freshness.ChangeSignal` instead of the server-wide
``pg_current_snapshot()`` (which moved on every write to any database of the server and so
emptied the lookup cache on other databases' traffic). SQLite keeps ``PRAGMA data_version``:
nothing to add there.

Why a sequence and an advisory lock rather than a counter row: ``UPDATE counter`` from every
writer's trigger serialises writers on one row lock held to commit, and two imports that also
wait on each other's best_configs rows deadlock. ``nextval`` never blocks, but it is visible
before the writer commits, so the trigger also takes a shared transaction-level advisory lock
(writers never conflict with each other); the reader's one query tries the exclusive lock and
reads the value: a value read while no writer holds the lock counts only finished writers.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The names and the lock key are spelled here, not imported: a migration must keep meaning what
# it meant when written. service.store.freshness holds the same values (a test checks they agree).
SEQUENCE = "tunehub_change_seq"
FUNCTION = "tunehub_note_change"
TRIGGER = "tunehub_note_change"
LOCK_KEY = 8391734862498062881  # b"tunehub!" as a big-endian int64: tunehub's advisory key
#: every table a cached lookup answer or a read token check reads, and the writes that count.
#: An answer reaches measurements, variants, devices and toolchains only through a best_configs
#: row, so a row inserted there (every upload inserts its measurements and, ignoring conflicts,
#: its variants, device and toolchain) changes no answer until a best_configs write, which
#: counts; changing or removing one of them does.
_ALL = "INSERT OR UPDATE OR DELETE OR TRUNCATE"
_CHANGED = "UPDATE OR DELETE OR TRUNCATE"
WATCHED: dict[str, str] = {
    "best_configs": _ALL,
    "api_tokens": _ALL,
    "measurements": _CHANGED,
    "variants": _CHANGED,
    "devices": _CHANGED,
    "toolchains": _CHANGED,
}


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgresql():
        return
    op.execute(f"CREATE SEQUENCE {SEQUENCE}")
    op.execute(
        f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            -- held to commit or rollback: a reader seeing it held trusts no value yet
            PERFORM pg_advisory_xact_lock_shared({LOCK_KEY});
            PERFORM nextval('{SEQUENCE}');
            RETURN NULL;
        END
        $$
        """
    )
    for table, events in WATCHED.items():
        op.execute(
            f"CREATE TRIGGER {TRIGGER} BEFORE {events} ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
        )


def downgrade() -> None:
    if not _postgresql():
        return
    for table in WATCHED:
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {table}")
    op.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    op.execute(f"DROP SEQUENCE IF EXISTS {SEQUENCE}")
