"""Nodes of a cluster: their rows, agent tokens, heartbeats and exit codes. Functions take a
session and never commit.

Owns :func:`ensure_node` (idempotent by provider + instance id: a reconcile pass that sees the
same instance twice gets the same row), :func:`list_nodes`, :func:`issue_agent_token`,
:func:`record_heartbeat`, :func:`record_missed_heartbeat` and :func:`record_exit_code`.

States it moves: a new node starts PROVISIONING (history row written). Liveness decisions
(READY → LOST after N missed heartbeats) belong to the controller, through ``set_status``.
"""

from __future__ import annotations

from typing import Any, cast

from pydantic import SecretStr
from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from gpulease.state.machines import NodeState
from gpulease.state.models import Cluster, Node
from gpulease.state.status import record_created
from gpulease.state.tokens import new_token


def ensure_node(
    session: Session,
    cluster: Cluster,
    *,
    instance_id: str,
    node_rank: int,
    actor: str,
    now: float,
    provider: str | None = None,
    agent_url: str | None = None,
) -> Node:
    """The node row of ``instance_id`` (created PROVISIONING when new). ``provider`` defaults to
    the cluster's; a known ``agent_url`` is filled in when the row has none."""
    provider = provider or cluster.provider
    stmt = select(Node).where(Node.provider == provider, Node.instance_id == instance_id)
    node = session.scalars(stmt).one_or_none()
    if node is not None:
        if node.agent_url is None and agent_url is not None:
            node.agent_url = agent_url
            node.updated_at = now
        return node
    node = Node(
        cluster_id=cluster.id,
        node_rank=node_rank,
        instance_id=instance_id,
        provider=provider,
        state=NodeState.PROVISIONING,
        status_changed_at=now,
        agent_url=agent_url,
        missed_heartbeats=0,
        created_at=now,
        updated_at=now,
    )
    session.add(node)
    record_created(session, node, actor=actor, reason="instance seen")
    return node


def list_nodes(session: Session, cluster_id: int, *, live_only: bool = False) -> list[Node]:
    """The cluster's nodes by rank then id; ``live_only`` leaves TERMINATED ones out."""
    stmt = select(Node).where(Node.cluster_id == cluster_id).order_by(Node.node_rank, Node.id)
    if live_only:
        stmt = stmt.where(Node.state != NodeState.TERMINATED)
    return list(session.scalars(stmt))


def issue_agent_token(session: Session, node: Node, *, now: float) -> SecretStr:
    """A new agent token for ``node``: its hash replaces the stored one; the token itself is
    returned once, to hand to the agent, and is not kept."""
    token, token_hash = new_token()
    node.agent_token_hash = token_hash
    node.updated_at = now
    return token


def _update_node(session: Session, node_id: int, **values: Any) -> int:
    stmt = (
        update(Node)
        .where(Node.id == node_id)
        .values(**values)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], session.execute(stmt)).rowcount


def record_heartbeat(session: Session, node_id: int, *, now: float) -> bool:
    """A heartbeat arrived: stamp it and reset the missed count. False for an unknown node."""
    return (
        _update_node(session, node_id, last_heartbeat_at=now, missed_heartbeats=0, updated_at=now)
        == 1
    )


def record_missed_heartbeat(session: Session, node_id: int, *, now: float) -> int | None:
    """A heartbeat was due and did not come: add one to the missed count (atomically) and return
    it; None for an unknown node."""
    stmt = (
        update(Node)
        .where(Node.id == node_id)
        .values(missed_heartbeats=Node.missed_heartbeats + 1, updated_at=now)
        .returning(Node.missed_heartbeats)
        .execution_options(synchronize_session="fetch")
    )
    return session.scalars(stmt).one_or_none()


def record_exit_code(session: Session, node_id: int, exit_code: int, *, now: float) -> bool:
    """The task on the node exited with ``exit_code`` (75: preempted, checkpoint taken)."""
    return _update_node(session, node_id, exit_code=exit_code, updated_at=now) == 1
