"""Bench results: ``bench_runs``, one row per node per ``gpulease bench CLUSTER`` run (where the
node was, when, quick or full, the worst verdict and the report as JSON) — the history a node of
the same instance type is judged against, and what ``plan --observed`` summarises.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_TABLE = "bench_runs"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster", sa.String(length=255), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("instance_type", sa.String(length=128), nullable=True),
        sa.Column("accelerator", sa.String(length=64), nullable=True),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("quick", sa.Boolean(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bench_runs")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_bench_runs_provider_instance_type_started_at"), _TABLE,
                    ["provider", "instance_type", "started_at"], unique=False)  # fmt: skip
    op.create_index(op.f("ix_bench_runs_started_at"), _TABLE, ["started_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_bench_runs_started_at"), table_name=_TABLE)
    op.drop_index(op.f("ix_bench_runs_provider_instance_type_started_at"), table_name=_TABLE)
    op.drop_table(_TABLE)
