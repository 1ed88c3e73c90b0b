"""Nothing a client sends can break or poison the cache (issue 23).

- jobs.token_id: the token that submitted the job, its owner: only that token or an admin may
  cancel it (service.api.routes.jobs); jobs stored before have none (an admin cancels them);
- devices.copy_gbps / peak_tflops: the device's copy and peak rates as an admin recorded them;
  no measurement may beat them (service.store.checks);
- best_configs.pending_measurement_id: a record-beating winner held until another host
  confirms it (TUNEHUB_RECORD_MARGIN, service.store.confirm);
- token_devices: the devices an admin let a worker token serve (service.store.device_map).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_jobs_token_id", "api_tokens", ["token_id"], ["id"])
        batch.create_index("ix_jobs_token_id", ["token_id"])
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("copy_gbps", sa.Float(), nullable=True))
        batch.add_column(sa.Column("peak_tflops", sa.JSON(), nullable=True))
    with op.batch_alter_table("best_configs") as batch:
        batch.add_column(sa.Column("pending_measurement_id", sa.Integer(), nullable=True))
    op.create_table(
        "token_devices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "token_id",
            sa.Integer(),
            sa.ForeignKey("api_tokens.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("device_key", sa.String(length=400), nullable=False),
        sa.Column("device_uid", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_token_devices_token_id", "token_devices", ["token_id"])


def downgrade() -> None:
    op.drop_index("ix_token_devices_token_id", table_name="token_devices")
    op.drop_table("token_devices")
    with op.batch_alter_table("best_configs") as batch:
        batch.drop_column("pending_measurement_id")
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("peak_tflops")
        batch.drop_column("copy_gbps")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_token_id")
        batch.drop_constraint("fk_jobs_token_id", type_="foreignkey")
        batch.drop_column("token_id")
