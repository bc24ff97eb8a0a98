"""Provider API outages for ``gpulease sla``: ``provider_outages``, one row per stretch of a
provider's API not answering.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TABLE = "provider_outages"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("operation", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("last_seen_at", sa.Double(), nullable=False),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_provider_outages")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        op.f("ix_provider_outages_provider_started_at"),
        _TABLE,
        ["provider", "started_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_provider_outages_provider_started_at"), table_name=_TABLE)
    op.drop_table(_TABLE)
