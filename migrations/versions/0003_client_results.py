"""Client-measured results: client_measurements and client_best_configs (Triton autotune
drop-in), kept apart from the worker-verified tables.

Revision ID: 0003
Revises: 0001 (no revision 0002 was ever merged)
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "client_measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=80), nullable=False),
        sa.Column("kernel_name", sa.String(length=200), nullable=False),
        sa.Column("key", sa.JSON(), nullable=False),
        sa.Column("key_text", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), nullable=False),
        sa.Column("config_name", sa.String(length=300), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"]),
        sa.ForeignKeyConstraint(["toolchain_id"], ["toolchains.id"]),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_client_measurements_key",
        "client_measurements",
        ["op", "key_text", "device_id"],
    )
    op.create_table(
        "client_best_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=80), nullable=False),
        sa.Column("key_text", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), nullable=False),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"]),
        sa.ForeignKeyConstraint(["toolchain_id"], ["toolchains.id"]),
        sa.ForeignKeyConstraint(["measurement_id"], ["client_measurements.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "op", "key_text", "device_id", "toolchain_id", name="uq_client_best_configs_key"
        ),
    )


def downgrade() -> None:
    op.drop_table("client_best_configs")
    op.drop_index("ix_client_measurements_key", table_name="client_measurements")
    op.drop_table("client_measurements")
