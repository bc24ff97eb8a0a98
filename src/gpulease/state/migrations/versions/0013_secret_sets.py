"""Secret sets: ``secret_sets``, one row per task's ``secrets:`` sealed by the server's vault
(AES-256-GCM; the key id, the nonce and the ciphertext of the whole ``{name: value}`` JSON, never
a value in clear).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_TABLE = "secret_sets"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=64), nullable=False),
        sa.Column("nonce", sa.LargeBinary(), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_secret_sets")),
    )
    op.create_index(op.f("ix_secret_sets_key_id"), _TABLE, ["key_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_secret_sets_key_id"), table_name=_TABLE)
    op.drop_table(_TABLE)
