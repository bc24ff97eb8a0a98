"""Shared pieces of the reconcile rules: the configuration, terminating nodes, giving a target
up (failover or FAILED), and node IPs. Pure functions of a :class:`Snapshot`. Moves no states
itself (it returns actions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpulease.controller.actions import (
    Action,
    FailOver,
    SetCluster,
    SetIntent,
    SetNode,
    Terminate,
)
from gpulease.controller.snapshot import NodeView, Snapshot
from gpulease.state import ClusterStatus, IntentStatus, NodeState


@dataclass(frozen=True, slots=True)
class ReconcileConfig:
    """``lost_after_missed``: agent polls missed in a row before a node is LOST (DESIGN 7);
    ``heartbeat_write_s``: how stale ``last_heartbeat_at`` may get before a pass rewrites it."""

    lost_after_missed: int = 6
    heartbeat_write_s: float = 10.0


DOWN_STATES = frozenset({NodeState.TERMINATING, NodeState.TERMINATED})


def active_nodes(snap: Snapshot) -> tuple[NodeView, ...]:
    """Nodes that belong to the cluster's current run (not being or already terminated)."""
    return tuple(n for n in snap.nodes if n.state not in DOWN_STATES)


def terminate_nodes(nodes: Iterable[NodeView], reason: str) -> list[Action]:
    """Terminate the nodes' instances (grouped by provider) and mark the rows TERMINATING."""
    by_provider: dict[str, list[str]] = defaultdict(list)
    actions: list[Action] = []
    for node in nodes:
        if node.state is NodeState.TERMINATED:
            continue
        by_provider[node.provider].append(node.instance_id)
        if node.state is not NodeState.TERMINATING:
            actions.append(SetNode(node.id, NodeState.TERMINATING, reason))
    terminate: list[Action] = [
        Terminate(provider, tuple(ids)) for provider, ids in sorted(by_provider.items())
    ]
    return terminate + actions


def close_intents(snap: Snapshot, reason: str) -> list[Action]:
    return [SetIntent(i.request_id, IntentStatus.FAILED, reason) for i in snap.intents if i.open]


def give_up_target(snap: Snapshot, error: str) -> list[Action]:
    """The current target failed: terminate what it started, then fail over to the next plan, or
    FAILED when none is left."""
    actions = terminate_nodes(active_nodes(snap), f"giving up the target: {error}")
    following = snap.cluster.document.next_target(snap.cluster.failovers)
    if following is not None:
        return [*actions, FailOver(following, error)]
    return [
        *actions,
        *close_intents(snap, error),
        SetCluster(ClusterStatus.FAILED, f"no offer left to try: {error}", "launch"),
    ]


def confirm_terminated(snap: Snapshot) -> list[Action]:
    """TERMINATING nodes: TERMINATED once the provider confirms them gone, else terminate again."""
    actions: list[Action] = []
    again: list[NodeView] = []
    for node in snap.nodes:
        if node.state is not NodeState.TERMINATING or snap.instances is None:
            continue
        if snap.instance_gone(node):
            actions.append(SetNode(node.id, NodeState.TERMINATED, "the provider confirms it gone"))
        else:
            again.append(node)
    return terminate_nodes(again, "terminate re-issued") + actions


def node_ips(snap: Snapshot, nodes: Iterable[NodeView]) -> tuple[str, ...]:
    """Each node's address, by rank: the provider's private IP, else the agent URL's host."""
    ips: list[str] = []
    for node in sorted(nodes, key=lambda n: n.rank):
        found = (snap.instances or {}).get(node.instance_id)
        ip = found.private_ip if found is not None else None
        if not ip and node.agent_url:
            ip = urlsplit(node.agent_url).hostname
        ips.append(ip or "127.0.0.1")
    return tuple(ips)


def agent_ports(nodes: Iterable[NodeView], ips: tuple[str, ...]) -> tuple[int | None, ...]:
    """Each node's agent port, by rank, where its agent URL is on the node's own address (local,
    sim, slurm); None where it is not (an SSH tunnel's local end: the node's agent listens on
    the provider's fixed port, which its peers know as their own)."""
    ports: list[int | None] = []
    for node, ip in zip(sorted(nodes, key=lambda n: n.rank), ips, strict=False):
        url = urlsplit(node.agent_url) if node.agent_url else None
        ports.append(url.port if url is not None and url.hostname == ip else None)
    return tuple(ports)
