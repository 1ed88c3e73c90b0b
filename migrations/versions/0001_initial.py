"""Initial schema: devices, toolchains, jobs, tasks, workers, leases, variants,
measurements, best_configs and api_tokens.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("arch", sa.String(length=64), nullable=False),
        sa.Column("sm_count", sa.Integer(), nullable=False),
        sa.Column("driver", sa.String(length=100), nullable=False),
        sa.Column("runtime", sa.String(length=100), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("backend", "name", "arch", "sm_count", name="uq_devices_key"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("layout", sa.String(length=16), nullable=False),
        sa.Column("device", sa.JSON(), nullable=False),
        sa.Column("backend", sa.String(length=16), nullable=False),
        sa.Column("strategy", sa.String(length=32), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("objective", sa.String(length=16), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_jobs_status", "jobs", ["status"])

    op.create_table(
        "toolchains",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("compiler", sa.String(length=200), nullable=False),
        sa.Column("template_version", sa.String(length=100), nullable=False),
        sa.Column("libraries", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_table(
        "variants",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("problem", sa.JSON(), nullable=False),
        sa.Column("problem_key", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("lease_id", sa.String(length=32), nullable=True),
        sa.Column("lease_owner", sa.String(length=32), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("progress_done", sa.Integer(), nullable=False),
        sa.Column("progress_total", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("winner_measurement_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_tasks_job_id"), "tasks", ["job_id"])
    op.create_index(op.f("ix_tasks_lease_id"), "tasks", ["lease_id"])
    op.create_index("ix_tasks_status_created", "tasks", ["status", "created_at"])

    op.create_table(
        "worker_devices",
        sa.Column("worker_id", sa.String(length=32), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["device_id"], ["devices.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["worker_id"], ["workers.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("worker_id", "device_id"),
    )
    op.create_table(
        "leases",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("worker_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["worker_id"], ["workers.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_leases_task_id"), "leases", ["task_id"])

    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=True),
        sa.Column("job_id", sa.String(length=32), nullable=True),
        sa.Column("variant_id", sa.String(length=64), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("layout", sa.String(length=16), nullable=False),
        sa.Column("problem", sa.JSON(), nullable=False),
        sa.Column("problem_key", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("median_us", sa.Float(), nullable=True),
        sa.Column("p20_us", sa.Float(), nullable=True),
        sa.Column("p80_us", sa.Float(), nullable=True),
        sa.Column("min_us", sa.Float(), nullable=True),
        sa.Column("reps", sa.BigInteger(), nullable=True),
        sa.Column("throughput", sa.Float(), nullable=True),
        sa.Column("throughput_unit", sa.String(length=32), nullable=False),
        sa.Column("compile_seconds", sa.Float(), nullable=True),
        sa.Column("log", sa.Text(), nullable=False),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("suspect", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["toolchain_id"],
            ["toolchains.id"],
        ),
        sa.ForeignKeyConstraint(
            ["variant_id"],
            ["variants.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_measurements_job_id"), "measurements", ["job_id"])
    op.create_index(
        "ix_measurements_problem",
        "measurements",
        ["op", "dtype", "layout", "problem_key", "device_id"],
    )
    op.create_index(op.f("ix_measurements_task_id"), "measurements", ["task_id"])

    op.create_table(
        "best_configs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=16), nullable=False),
        sa.Column("dtype", sa.String(length=8), nullable=False),
        sa.Column("layout", sa.String(length=16), nullable=False),
        sa.Column("problem", sa.JSON(), nullable=False),
        sa.Column("problem_key", sa.Text(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("toolchain_id", sa.Integer(), nullable=False),
        sa.Column("measurement_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"],
            ["devices.id"],
        ),
        sa.ForeignKeyConstraint(
            ["measurement_id"],
            ["measurements.id"],
        ),
        sa.ForeignKeyConstraint(
            ["toolchain_id"],
            ["toolchains.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint(
            "op",
            "dtype",
            "layout",
            "problem_key",
            "device_id",
            "toolchain_id",
            name="uq_best_configs_key",
        ),
    )


def downgrade() -> None:
    op.drop_table("best_configs")
    op.drop_index(op.f("ix_measurements_task_id"), table_name="measurements")
    op.drop_index("ix_measurements_problem", table_name="measurements")
    op.drop_index(op.f("ix_measurements_job_id"), table_name="measurements")

    op.drop_table("measurements")
    op.drop_index(op.f("ix_leases_task_id"), table_name="leases")

    op.drop_table("leases")
    op.drop_table("worker_devices")
    op.drop_index("ix_tasks_status_created", table_name="tasks")
    op.drop_index(op.f("ix_tasks_lease_id"), table_name="tasks")
    op.drop_index(op.f("ix_tasks_job_id"), table_name="tasks")

    op.drop_table("tasks")
    op.drop_table("workers")
    op.drop_table("variants")
    op.drop_table("toolchains")
    op.drop_index("ix_jobs_status", table_name="jobs")

    op.drop_table("jobs")
    op.drop_table("devices")
    op.drop_table("api_tokens")
