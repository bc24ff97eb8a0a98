"""Telemetry: the nodes' downsampled samples (``telemetry_points``) and autostop's load rule
(``clusters.autostop_gpu_below``, ``clusters.gpu_active_at``).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_TABLE = "telemetry_points"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("cluster_name", sa.String(length=255), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("resolution_s", sa.Integer(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_telemetry_points")),
        sa.UniqueConstraint(
            "cluster_id",
            "node_rank",
            "resolution_s",
            "at",
            name=op.f("uq_telemetry_points_cluster_id_node_rank_resolution_s_at"),
        ),
        sqlite_autoincrement=True,
    )
    for columns in (["cluster_id", "resolution_s", "at"], ["job_id", "resolution_s", "at"],
                    ["resolution_s", "at"]):  # fmt: skip
        op.create_index(op.f(f"ix_{_TABLE}_{'_'.join(columns)}"), _TABLE, columns, unique=False)
    with op.batch_alter_table("clusters", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("autostop_gpu_below", sa.Double(), nullable=True))
        batch.add_column(sa.Column("gpu_active_at", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clusters", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("gpu_active_at")
        batch.drop_column("autostop_gpu_below")
    for columns in (["resolution_s", "at"], ["job_id", "resolution_s", "at"],
                    ["cluster_id", "resolution_s", "at"]):  # fmt: skip
        op.drop_index(op.f(f"ix_{_TABLE}_{'_'.join(columns)}"), table_name=_TABLE)
    op.drop_table(_TABLE)
