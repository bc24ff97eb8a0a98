"""Jobs are claimed like clusters: the reconcile claim columns on ``jobs``.

The managed-jobs loop runs on the same reconcile skeleton as the cluster loop (claim → snapshot →
decision → apply → per-entity backoff), so two workers never step one job at once.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("lock_worker", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("lock_token", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("lock_expires_at", sa.Double(), nullable=True))
        batch.add_column(sa.Column("last_processed_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        for name in ("last_processed_at", "lock_expires_at", "lock_token", "lock_worker"):
            batch.drop_column(name)
