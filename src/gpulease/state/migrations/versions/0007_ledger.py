"""The cost ledger: ``ledger_entries``, one row per billed interval of a node, a stopped node's
volumes or a checkpoint store.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TABLE = "ledger_entries"
_INDEXED = ("started_at", "ended_at", "cluster_id", "job_id", "closed")


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entry_key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=True),
        sa.Column("instance_id", sa.String(length=128), nullable=True),
        sa.Column("cluster_id", sa.Integer(), nullable=True),
        sa.Column("cluster_name", sa.String(length=255), nullable=True),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("service", sa.String(length=255), nullable=True),
        sa.Column("task_name", sa.String(length=255), nullable=True),
        sa.Column("user", sa.String(length=64), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("zone", sa.String(length=64), nullable=True),
        sa.Column("instance_type", sa.String(length=128), nullable=True),
        sa.Column("accelerator", sa.String(length=64), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("pricing", sa.String(length=16), nullable=False),
        sa.Column("price_per_hour", sa.Double(), nullable=False),
        sa.Column("on_demand_price_per_hour", sa.Double(), nullable=True),
        sa.Column("quoted_per_hour", sa.Double(), nullable=True),
        sa.Column("quantity", sa.Double(), nullable=True),
        sa.Column("billing", sa.String(length=32), nullable=False),
        sa.Column("run_started_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=False),
        sa.Column("closed", sa.Boolean(), nullable=False),
        sa.Column("billed_s", sa.Double(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_entries")),
        sa.UniqueConstraint("entry_key", name=op.f("uq_ledger_entries_entry_key")),
        sqlite_autoincrement=True,
    )
    for column in _INDEXED:
        op.create_index(op.f(f"ix_{_TABLE}_{column}"), _TABLE, [column], unique=False)


def downgrade() -> None:
    for column in reversed(_INDEXED):
        op.drop_index(op.f(f"ix_{_TABLE}_{column}"), table_name=_TABLE)
    op.drop_table(_TABLE)
