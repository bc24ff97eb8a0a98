"""The cost ledger's indexes for a ledger with a long history (benchmarks/cost/accrual.py, with
300,000 closed rows beside 1,000 open ones):

- the open rows get a partial index, ``ix_ledger_entries_open (node_id) WHERE closed IS
  false``: the accrual's join of nodes with their open row, its in-place UPDATE, its orphan
  check and the report's open rows read only the open rows through it, whatever the planner's
  statistics say (with ``ix_ledger_entries_closed`` and ``ix_ledger_entries_node_open`` the
  planners scanned every row — SQLite — or joined every open row with every node —
  PostgreSQL, with statistics taken before the rows opened: 45 ms / 350 ms a pass); both go;
- three indexes that a wider one already leads with go (``ix_ledger_entries_ended_at`` ⊂
  ``ix_ledger_entries_period``, ``ix_ledger_entries_job_id`` ⊂ ``ix_ledger_entries_job_cost``,
  ``ix_ledger_entries_cluster_id`` ⊂ ``ix_ledger_entries_cluster_cost``): every advance of an
  open row rewrote their entries for no reader the wider ones do not serve.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_TABLE = "ledger_entries"
_DROPPED = {"ix_ledger_entries_ended_at": ["ended_at"], "ix_ledger_entries_job_id": ["job_id"],
            "ix_ledger_entries_cluster_id": ["cluster_id"], "ix_ledger_entries_closed": ["closed"],
            "ix_ledger_entries_node_open": ["node_id", "closed"]}  # fmt: skip


def upgrade() -> None:
    for name in _DROPPED:
        op.drop_index(name, table_name=_TABLE)
    op.create_index(
        "ix_ledger_entries_open",
        _TABLE,
        ["node_id"],
        unique=False,
        sqlite_where=sa.text("closed IS 0"),
        postgresql_where=sa.text("closed IS false"),
    )


def downgrade() -> None:
    op.drop_index("ix_ledger_entries_open", table_name=_TABLE)
    for name, columns in _DROPPED.items():
        op.create_index(name, _TABLE, columns, unique=False)
