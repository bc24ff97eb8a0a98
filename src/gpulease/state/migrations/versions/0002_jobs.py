"""Managed jobs: the ``jobs`` table; clusters learn the job they serve and why they failed.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("task", sa.JSON(), nullable=False),
        sa.Column("workdir", sa.Text(), nullable=True),
        sa.Column("clock", sa.String(length=64), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=True),
        sa.Column("pricing", sa.String(length=16), nullable=True),
        sa.Column("recoveries", sa.Integer(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("blocked", sa.JSON(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("run_s", sa.Double(), nullable=False),
        sa.Column("mark_at_job", sa.Double(), nullable=True),
        sa.Column("started_at_job", sa.Double(), nullable=False),
        sa.Column("next_attempt_at", sa.Double(), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("pending_stop", sa.String(length=16), nullable=True),
        sa.Column("failure", sa.String(length=16), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_jobs_name"), "jobs", ["name"], unique=False)
    op.create_index(op.f("ix_jobs_owner"), "jobs", ["owner"], unique=False)
    op.create_index(op.f("ix_jobs_status"), "jobs", ["status"], unique=False)
    with op.batch_alter_table("clusters") as batch:
        batch.add_column(sa.Column("job_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("failure", sa.String(length=16), nullable=True))
        batch.create_index(op.f("ix_clusters_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("clusters") as batch:
        batch.drop_index(op.f("ix_clusters_job_id"))
        batch.drop_column("failure")
        batch.drop_column("job_id")
    op.drop_index(op.f("ix_jobs_status"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_owner"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_name"), table_name="jobs")
    op.drop_table("jobs")
