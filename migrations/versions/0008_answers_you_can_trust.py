"""Answers you can trust: host identities, tie sets, and answers that say they are incomplete.

- workers.host_fingerprint / device_uids: the host a worker runs on and the physical devices
  it measures on; a confirmation must come from another host and another device
  (service.store.confirm), not merely another token;
- tasks.confirm_exclude_token_id is dropped: who may take a re-measuring task is decided from
  the identity of the worker that measured the winner;
- tasks.tie_set / best_configs.tie_set: the variants the deciding job could not tell from its
  fastest (tuner.winner), the winner first;
- tasks.unmeasured / best_configs.unmeasured: budgeted candidates a spent budget left
  unmeasured (0: complete).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("host_fingerprint", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("device_uids", sa.JSON(), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("confirm_exclude_token_id")
        batch.add_column(sa.Column("tie_set", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("unmeasured", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("best_configs") as batch:
        batch.add_column(sa.Column("tie_set", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("unmeasured", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("best_configs") as batch:
        batch.drop_column("unmeasured")
        batch.drop_column("tie_set")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("unmeasured")
        batch.drop_column("tie_set")
        batch.add_column(sa.Column("confirm_exclude_token_id", sa.Integer(), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("device_uids")
        batch.drop_column("host_fingerprint")
