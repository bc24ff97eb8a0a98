"""Clusters say where their task failed: ``clusters.task_failure`` (JSON: the node's rank, the
task's state, the step — setup, run, file sync, … — exit code, signal and the agent's detail).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("task_failure", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clusters", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("task_failure")
