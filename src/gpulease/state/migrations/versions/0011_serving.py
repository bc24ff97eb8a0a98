"""Serving: ``services`` (replica clusters behind the server's load balancer, scaled by load)
and ``pools`` (nodes kept for managed jobs, sized by the queue), each with the reconcile claim's
columns; ``clusters.service_id`` / ``clusters.replica_version`` (a service's replica and the
version of the service it runs) and ``clusters.pool_id`` (a pool's node).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _claimed_row(table: str, *columns: sa.Column[object]) -> None:
    """A table of named entities with a status, a JSON document and the reconcile claim."""
    op.create_table(
        table,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("task", sa.JSON(), nullable=False),
        *columns,
        sa.Column("decisions", sa.JSON(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("lock_worker", sa.String(length=128), nullable=True),
        sa.Column("lock_token", sa.String(length=64), nullable=True),
        sa.Column("lock_expires_at", sa.Double(), nullable=True),
        sa.Column("last_processed_at", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f(f"pk_{table}")),
        sa.UniqueConstraint("name", name=op.f(f"uq_{table}_name")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f(f"ix_{table}_owner"), table, ["owner"], unique=False)
    op.create_index(op.f(f"ix_{table}_status"), table, ["status"], unique=False)


def upgrade() -> None:
    _claimed_row(
        "services",
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("endpoint_port", sa.Integer(), nullable=True),
        sa.Column("desired_replicas", sa.Integer(), nullable=False),
        sa.Column("autoscale", sa.JSON(), nullable=False),
    )
    _claimed_row("pools", sa.Column("desired_nodes", sa.Integer(), nullable=False))
    for column in ("service_id", "replica_version", "pool_id"):
        op.add_column("clusters", sa.Column(column, sa.Integer(), nullable=True))
    op.create_index(op.f("ix_clusters_service_id"), "clusters", ["service_id"], unique=False)
    op.create_index(op.f("ix_clusters_pool_id"), "clusters", ["pool_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_clusters_pool_id"), table_name="clusters")
    op.drop_index(op.f("ix_clusters_service_id"), table_name="clusters")
    with op.batch_alter_table("clusters", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("pool_id")
        batch.drop_column("replica_version")
        batch.drop_column("service_id")
    for table in ("pools", "services"):
        op.drop_index(op.f(f"ix_{table}_status"), table_name=table)
        op.drop_index(op.f(f"ix_{table}_owner"), table_name=table)
        op.drop_table(table)
