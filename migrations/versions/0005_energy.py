"""Energy objective: measurements.energy_j, joules per launch from the NVML energy counter over
the timed batches (null where the backend has no counter).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("measurements", sa.Column("energy_j", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("measurements", "energy_j")
