"""The JSON the API returns for a cluster (what ``gpulease status --json`` prints). Secrets never
appear: no tokens, no token hashes, no task envs; the task's secrets by name only (``secrets``).
Moves no states."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gpulease.controller import LaunchDocument
from gpulease.state import history, list_nodes
from gpulease.state.models import Cluster, Node


def node_view(node: Node) -> dict[str, Any]:
    return {
        "rank": node.node_rank,
        "instance_id": node.instance_id,
        "provider": node.provider,
        "state": node.state.value,
        "agent_url": node.agent_url,
        "last_heartbeat_at": node.last_heartbeat_at,
        "missed_heartbeats": node.missed_heartbeats,
        "exit_code": node.exit_code,
    }


def exit_code(nodes: list[Node]) -> int | None:
    """The task's exit status: the lowest rank's non-zero code, else 0 when some node reported
    one, else None."""
    codes = [
        n.exit_code for n in sorted(nodes, key=lambda n: n.node_rank) if n.exit_code is not None
    ]
    failing = [c for c in codes if c != 0]
    if failing:
        return failing[0]
    return 0 if codes else None


def cluster_view(
    session: Session, cluster: Cluster, *, with_history: bool = False
) -> dict[str, Any]:
    nodes = list_nodes(session, cluster.id, live_only=False)
    changes = history(session, cluster)
    doc = LaunchDocument.from_json(cluster.task)
    view: dict[str, Any] = {
        "name": cluster.name,
        "status": cluster.status.value,
        "reason": changes[-1].reason if changes else "",
        "provider": cluster.provider,
        "region": cluster.region,
        "zone": cluster.zone,
        "instance_type": cluster.instance_type,
        "accelerator": cluster.accelerator,
        "gpus_per_node": cluster.gpus_per_node,
        "num_nodes": cluster.num_nodes,
        "pricing": cluster.pricing,
        "price_per_hour": cluster.price_per_hour,
        "created_at": cluster.created_at,
        "status_changed_at": cluster.status_changed_at,
        "autostop": {
            "minutes": cluster.autostop_minutes,
            "down": cluster.autostop_down,
            "gpu_utilisation_below": cluster.autostop_gpu_below,
        },
        "gpu_active_at": cluster.gpu_active_at,
        "last_activity_at": cluster.last_activity_at,
        "failover_history": list(cluster.failover_history),
        "plans": len(doc.plans),
        "secrets": list(doc.run.secret_names),  # names only, never a value
        "exit_code": exit_code(nodes),
        # where the task failed (FAILED with failure "task"): {rank, state, step, exit_code,
        # signal, detail}; None otherwise
        "task_failure": cluster.task_failure if cluster.failure == "task" else None,
        "nodes": [node_view(n) for n in nodes],
    }
    if with_history:
        view["history"] = [
            {"from": c.from_status, "to": c.to_status, "at": c.at, "reason": c.reason}
            for c in changes
        ]
    return view
