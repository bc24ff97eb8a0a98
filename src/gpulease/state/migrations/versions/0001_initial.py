"""Initial schema: clusters, nodes, launch intents, status history, server identity.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("zone", sa.String(length=64), nullable=True),
        sa.Column("instance_type", sa.String(length=128), nullable=True),
        sa.Column("accelerator", sa.String(length=64), nullable=True),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("pricing", sa.String(length=16), nullable=False),
        sa.Column("price_per_hour", sa.Double(), nullable=True),
        sa.Column("task", sa.JSON(), nullable=False),
        sa.Column("workdir", sa.Text(), nullable=True),
        sa.Column("autostop_minutes", sa.Integer(), nullable=True),
        sa.Column("autostop_down", sa.Boolean(), nullable=False),
        sa.Column("last_activity_at", sa.Double(), nullable=True),
        sa.Column("failover_history", sa.JSON(), nullable=False),
        sa.Column("lock_worker", sa.String(length=128), nullable=True),
        sa.Column("lock_token", sa.String(length=64), nullable=True),
        sa.Column("lock_expires_at", sa.Double(), nullable=True),
        sa.Column("last_processed_at", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
        sa.UniqueConstraint("name", name=op.f("uq_clusters_name")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_clusters_owner"), "clusters", ["owner"])
    op.create_index(op.f("ix_clusters_status"), "clusters", ["status"])

    op.create_table(
        "server_identity",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_server_identity")),
        sa.UniqueConstraint("owner_id", name=op.f("uq_server_identity_owner_id")),
    )
    op.create_table(
        "status_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("entity_kind", sa.String(length=16), nullable=False),
        sa.Column("entity_id", sa.Integer(), nullable=False),
        sa.Column("from_status", sa.String(length=32), nullable=True),
        sa.Column("to_status", sa.String(length=32), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_status_changes")),
    )
    op.create_index(
        op.f("ix_status_changes_entity_kind_entity_id"),
        "status_changes",
        ["entity_kind", "entity_id"],
    )

    op.create_table(
        "launch_intents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=True),
        sa.Column("zone", sa.String(length=64), nullable=True),
        sa.Column("instance_type", sa.String(length=128), nullable=True),
        sa.Column("pricing", sa.String(length=16), nullable=False),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_launch_intents_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_launch_intents")),
        sa.UniqueConstraint("request_id", name=op.f("uq_launch_intents_request_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_launch_intents_cluster_id"), "launch_intents", ["cluster_id"])
    op.create_index(op.f("ix_launch_intents_status"), "launch_intents", ["status"])

    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("cluster_id", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("status_changed_at", sa.Double(), nullable=False),
        sa.Column("agent_url", sa.String(length=512), nullable=True),
        sa.Column("agent_token_hash", sa.String(length=64), nullable=True),
        sa.Column("last_heartbeat_at", sa.Double(), nullable=True),
        sa.Column("missed_heartbeats", sa.Integer(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(
            ["cluster_id"],
            ["clusters.id"],
            name=op.f("fk_nodes_cluster_id_clusters"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nodes")),
        sa.UniqueConstraint("provider", "instance_id", name=op.f("uq_nodes_provider_instance_id")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_nodes_cluster_id"), "nodes", ["cluster_id"])
    op.create_index(op.f("ix_nodes_state"), "nodes", ["state"])


def downgrade() -> None:
    op.drop_index(op.f("ix_nodes_state"), table_name="nodes")
    op.drop_index(op.f("ix_nodes_cluster_id"), table_name="nodes")

    op.drop_table("nodes")
    op.drop_index(op.f("ix_launch_intents_status"), table_name="launch_intents")
    op.drop_index(op.f("ix_launch_intents_cluster_id"), table_name="launch_intents")

    op.drop_table("launch_intents")
    op.drop_index(op.f("ix_status_changes_entity_kind_entity_id"), table_name="status_changes")

    op.drop_table("status_changes")
    op.drop_table("server_identity")
    op.drop_index(op.f("ix_clusters_status"), table_name="clusters")
    op.drop_index(op.f("ix_clusters_owner"), table_name="clusters")

    op.drop_table("clusters")
