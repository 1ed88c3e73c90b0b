"""A ``revision`` on best_configs, bumped by every write that changes an answer, so a lookup
process keeps an in-memory read model of the answers and loads only what changed
(:mod:`service.store.read_model`, issue 24).

Every insert or update of a best_configs row stamps it with a new revision; an artifact
stored, replaced or removed, and a device's driver/runtime/memory changed, touch the best
configs whose answer names them, so they are stamped too. The stamps are given by triggers,
so no write path can forget one:

- SQLite: ``max(revision) + 1`` (an index probe) after each row write; SQLite has one writer
  at a time, so revisions are committed in order. Careful: a later ``batch_alter_table`` on
  best_configs, artifacts or devices rebuilds the table and drops its triggers; such a
  migration must create them again (``_sqlite_triggers`` below).
- PostgreSQL: ``nextval('tunehub_change_seq')`` (migration 0006's sequence) in a row-level
  BEFORE trigger. Concurrent writers can commit revisions out of order, but each holds 0006's
  shared advisory lock from before its first stamp to its commit, so a reader that takes the
  lock exclusively (:class:`service.store.freshness.ChangeSignal`) and reads the sequence
  knows every revision up to that value is committed.

Existing rows get revision = id (SQLite) or a sequence value (PostgreSQL).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_best_configs_revision"
# migration 0006's sequence, spelled here (a migration keeps meaning what it meant when written)
SEQUENCE = "tunehub_change_seq"
PG_FUNCTION = "tunehub_best_revision"
PG_TOUCH_ARTIFACT = "tunehub_touch_artifact"
PG_TOUCH_DEVICE = "tunehub_touch_device"
#: the best configs an artifact row names (its variant, arch and toolchain)
_ARTIFACT_ROWS = (
    "toolchain_id = {row}.toolchain_id AND measurement_id IN (SELECT id FROM measurements "
    "WHERE variant_id = {row}.variant_id) AND device_id IN (SELECT id FROM devices "
    "WHERE arch = {row}.arch)"
)
_SQLITE_NEXT = "(SELECT coalesce(max(revision), 0) + 1 FROM best_configs)"
#: trigger name -> SQL (SQLite); the best_configs update trigger watches every column but
#: revision, so its own stamp does not fire it again
_SQLITE_TRIGGERS = {
    "best_configs_revision_insert": (
        "AFTER INSERT ON best_configs BEGIN "
        f"UPDATE best_configs SET revision = {_SQLITE_NEXT} WHERE id = NEW.id; END"
    ),
    "best_configs_revision_update": (
        "AFTER UPDATE OF op, dtype, layout, problem, problem_key, device_id, toolchain_id, "
        "measurement_id, confirmed, tie_set, unmeasured, pending_measurement_id, created_at, "
        "updated_at ON best_configs BEGIN "
        f"UPDATE best_configs SET revision = {_SQLITE_NEXT} WHERE id = NEW.id; END"
    ),
    **{
        f"artifacts_revision_{event.lower()}": (
            f"AFTER {event} ON artifacts BEGIN UPDATE best_configs SET revision = "
            f"{_SQLITE_NEXT} WHERE {_ARTIFACT_ROWS.format(row=row)}; END"
        )
        for event, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD"))
    },
    "devices_revision_update": (
        "AFTER UPDATE OF driver, runtime, memory_bytes, name, arch, backend, sm_count "
        "ON devices BEGIN UPDATE best_configs SET revision = "
        f"{_SQLITE_NEXT} WHERE device_id = NEW.id; END"
    ),
}


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _sqlite_triggers() -> None:
    for name, body in _SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def _pg_triggers() -> None:
    op.execute(
        f"""
        CREATE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.revision := nextval('{SEQUENCE}');
            RETURN NEW;
        END
        $$
        """
    )
    op.execute(
        f"CREATE TRIGGER {PG_FUNCTION} BEFORE INSERT OR UPDATE ON best_configs "
        f"FOR EACH ROW EXECUTE FUNCTION {PG_FUNCTION}()"
    )
    # touching a row (revision = 0) runs the trigger above, which stamps a new revision
    op.execute(
        f"""
        CREATE FUNCTION {PG_TOUCH_ARTIFACT}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP <> 'INSERT' THEN
                UPDATE best_configs SET revision = 0 WHERE {_ARTIFACT_ROWS.format(row="OLD")};
            END IF;
            IF TG_OP <> 'DELETE' THEN
                UPDATE best_configs SET revision = 0 WHERE {_ARTIFACT_ROWS.format(row="NEW")};
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"CREATE TRIGGER {PG_TOUCH_ARTIFACT} AFTER INSERT OR UPDATE OR DELETE ON artifacts "
        f"FOR EACH ROW EXECUTE FUNCTION {PG_TOUCH_ARTIFACT}()"
    )
    op.execute(
        f"""
        CREATE FUNCTION {PG_TOUCH_DEVICE}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (NEW.driver, NEW.runtime, NEW.memory_bytes, NEW.name, NEW.arch, NEW.backend,
                NEW.sm_count) IS DISTINCT FROM (OLD.driver, OLD.runtime, OLD.memory_bytes,
                OLD.name, OLD.arch, OLD.backend, OLD.sm_count) THEN
                UPDATE best_configs SET revision = 0 WHERE device_id = NEW.id;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"CREATE TRIGGER {PG_TOUCH_DEVICE} AFTER UPDATE ON devices "
        f"FOR EACH ROW EXECUTE FUNCTION {PG_TOUCH_DEVICE}()"
    )


def upgrade() -> None:
    op.add_column("best_configs", sa.Column("revision", sa.BigInteger(), nullable=True))
    op.create_index(INDEX, "best_configs", ["revision"])
    if _postgresql():
        _pg_triggers()
        op.execute("UPDATE best_configs SET revision = 0")  # the trigger stamps each row
    else:
        op.execute("UPDATE best_configs SET revision = id")
        _sqlite_triggers()


def downgrade() -> None:
    if _postgresql():
        op.execute(f"DROP TRIGGER IF EXISTS {PG_TOUCH_DEVICE} ON devices")
        op.execute(f"DROP FUNCTION IF EXISTS {PG_TOUCH_DEVICE}()")
        op.execute(f"DROP TRIGGER IF EXISTS {PG_TOUCH_ARTIFACT} ON artifacts")
        op.execute(f"DROP FUNCTION IF EXISTS {PG_TOUCH_ARTIFACT}()")
        op.execute(f"DROP TRIGGER IF EXISTS {PG_FUNCTION} ON best_configs")
        op.execute(f"DROP FUNCTION IF EXISTS {PG_FUNCTION}()")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index(INDEX, table_name="best_configs")
    with op.batch_alter_table("best_configs") as batch:
        batch.drop_column("revision")
