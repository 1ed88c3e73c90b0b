"""Nothing a client sends can break or poison the cache (issue 23).

- jobs.token_id: the token that submitted the job, its owner: only that token or an admin may
  cancel it (service.api.routes.jobs); jobs stored before have none (an admin cancels them).

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


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_token_id")
        batch.drop_constraint("fk_jobs_token_id", type_="foreignkey")
        batch.drop_column("token_id")
