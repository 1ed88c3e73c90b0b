"""Built artifacts: a winner's shared object per (variant, arch, toolchain), content-addressed by
sha256 (the file lives in the artifact directory, not in the database), and the build record
that rebuilds a variant's artifact (rendered source, flags, compiler identity, template version,
external headers, link libraries), once per variant id.

A best answer names its artifact (a left join on the artifact key), so on PostgreSQL a write to
``artifacts`` bumps the change signal of migration 0006 (the lookup caches are emptied as on
any answer-changing write). ``variant_builds`` changes no answer: no trigger.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# migration 0006's names, spelled here (a migration keeps meaning what it meant when written)
FUNCTION = "tunehub_note_change"
TRIGGER = "tunehub_note_change"


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.create_table(
        "variant_builds",
        sa.Column("variant_id", sa.String(length=64), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("variant_source", sa.Text(), nullable=True),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("build_flags", sa.JSON(), nullable=False),
        sa.Column("compiler", sa.Text(), nullable=False),
        sa.Column("compiler_name", sa.String(length=200), nullable=False),
        sa.Column("template_version", sa.String(length=100), nullable=False),
        sa.Column("needs", sa.JSON(), nullable=False),
        sa.Column("link", sa.JSON(), nullable=False),
        sa.Column("worker_id", sa.String(length=32), nullable=True),
        sa.Column("lease_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("variant_id"),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("variant_id", sa.String(length=64), nullable=False),
        sa.Column("arch", sa.String(length=64), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("storage_path", sa.Text(), nullable=False),
        sa.Column("worker_id", sa.String(length=32), nullable=True),
        sa.Column("lease_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["variant_id"], ["variants.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["toolchain_id"], ["toolchains.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("variant_id", "arch", "toolchain_id", name="uq_artifacts_key"),
    )
    op.create_index("ix_artifacts_sha256", "artifacts", ["sha256"])
    op.create_index("ix_artifacts_lease_id", "artifacts", ["lease_id"])
    if _postgresql():
        op.execute(
            f"CREATE TRIGGER {TRIGGER} BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE "
            f"ON artifacts FOR EACH STATEMENT EXECUTE FUNCTION {FUNCTION}()"
        )


def downgrade() -> None:
    if _postgresql():
        op.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON artifacts")
    op.drop_index("ix_artifacts_lease_id", table_name="artifacts")
    op.drop_index("ix_artifacts_sha256", table_name="artifacts")
    op.drop_table("artifacts")
    op.drop_table("variant_builds")
