"""Trust: worker tokens bound to their workers, idempotent uploads, optional confirmation.

- workers.token_id: the token that registered the worker (only it may lease, heartbeat and
  upload for that worker);
- measurements.lease_id / worker_id: who uploaded a measurement; unique (lease_id,
  variant_id), so a retried upload adds no rows;
- jobs.confirm: 2 asks a second worker (another token, same device key) to re-measure each
  winner; tasks.confirm_of / confirm_device_id / confirm_exclude_token_id describe such a
  re-measuring task;
- best_configs.confirmed: the winner was re-measured within the tie band by a second worker.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_workers_token_id", "api_tokens", ["token_id"], ["id"])
        batch.create_index("ix_workers_token_id", ["token_id"])
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("lease_id", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("worker_id", sa.String(length=32), nullable=True))
        batch.create_unique_constraint("uq_measurements_lease_variant", ["lease_id", "variant_id"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("confirm", sa.Integer(), nullable=False, server_default="1"))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("confirm_of", sa.String(length=32), nullable=True))
        batch.add_column(sa.Column("confirm_device_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("confirm_exclude_token_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("best_configs") as batch:
        batch.add_column(
            sa.Column("confirmed", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("best_configs") as batch:
        batch.drop_column("confirmed")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("confirm_exclude_token_id")
        batch.drop_column("confirm_device_id")
        batch.drop_column("confirm_of")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("confirm")
    with op.batch_alter_table("measurements") as batch:
        batch.drop_constraint("uq_measurements_lease_variant", type_="unique")
        batch.drop_column("worker_id")
        batch.drop_column("lease_id")
    with op.batch_alter_table("workers") as batch:
        batch.drop_index("ix_workers_token_id")
        batch.drop_constraint("fk_workers_token_id", type_="foreignkey")
        batch.drop_column("token_id")
