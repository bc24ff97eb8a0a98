"""The cost ledger's daily rollup for ``gpulease cost``: ``ledger_days``, per (UTC day, report
dimension, group key) the sums of the closed ledger rows' shares of that day — created empty:
the rows closed before it are added by the application at head
(:func:`gpulease.state.migrate.upgrade`, with the writer's own SQL), since a migration must not
import application code that may change after it —; and the
index ``ix_ledger_entries_node_open (node_id, closed)`` for the accrual's join of nodes with
their open rows.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_TABLE = "ledger_days"
_SUMS = ("cost_usd", "billed_s", "gpu_s", "spot_savings_usd", "spot_cost_usd", "cost_instance",
         "cost_volume", "cost_storage")  # fmt: skip


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dim", sa.String(length=16), nullable=False),
        sa.Column("day", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=600), nullable=False),
        *(sa.Column(name, sa.Double(), nullable=False) for name in _SUMS),
        sa.Column("entries", sa.Integer(), nullable=False),
        sa.Column("starts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_days")),
        sa.UniqueConstraint("dim", "day", "key", name=op.f("uq_ledger_days_dim_day_key")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "ix_ledger_entries_node_open", "ledger_entries", ["node_id", "closed"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_ledger_entries_node_open", table_name="ledger_entries")
    op.drop_table(_TABLE)
