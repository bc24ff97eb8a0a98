"""Rules for resting and powered-down clusters: autostop, STOPPING → STOPPED, STARTING →
SETTING_UP, and TERMINATING → TERMINATED.

- SUCCEEDED / FAILED: idle (the task finished) for ``autostop_minutes`` since the last activity →
  STOPPING, or TERMINATING with ``autostop_down`` or when the provider cannot stop instances.
- RUNNING with the load rule (``autostop_gpu_below``): GPUs below it for ``autostop_minutes`` —
  idle since the latest of ``gpu_active_at`` (the telemetry relay's stamp), entering RUNNING and
  the last activity — → STOPPING (TERMINATING as above), while the relay's GPU telemetry is
  fresh; a cluster without GPU telemetry is never stopped by the rule (unknown counts as busy).
- STOPPING: READY nodes → STOPPING and ``provider.stop``; STOPPED once the provider lists them
  stopped; nodes that cannot be stopped are terminated. All stopped → STOPPED.
- STARTING: STOPPED nodes → STARTING and ``provider.start``; READY when the agent answers (its
  URL may have changed); all READY → SETTING_UP (which submits the task only where the node does
  not already have it).
- TERMINATING: every instance tagged with the cluster is terminated, again on every pass, until
  the provider lists none; only then are the nodes and the cluster TERMINATED (DESIGN 2).
"""

from __future__ import annotations

from collections import defaultdict

from gpulease.controller.actions import (
    Action,
    RecordActivity,
    SetCluster,
    SetNode,
    Start,
    Stop,
    Terminate,
    UpdateNode,
)
from gpulease.controller.ports import Liveness
from gpulease.controller.rules import active_nodes, close_intents, terminate_nodes
from gpulease.controller.snapshot import GONE, Snapshot
from gpulease.providers.base import InstanceState
from gpulease.state import ClusterStatus, NodeState

_UP = frozenset({InstanceState.PENDING, InstanceState.RUNNING})


def resting(snap: Snapshot) -> list[Action]:
    """SUCCEEDED or FAILED: autostop when idle long enough."""
    cluster = snap.cluster
    if cluster.autostop_minutes is None:
        return []
    since = cluster.last_activity_at or cluster.status_changed_at
    if snap.now - since < cluster.autostop_minutes * 60.0:
        return []
    why = f"autostop: idle for {cluster.autostop_minutes} min"
    if cluster.autostop_down or not snap.can_stop:
        return [SetCluster(ClusterStatus.TERMINATING, why)]
    return [SetCluster(ClusterStatus.STOPPING, why)]


TELEMETRY_FRESH_S = 300.0
"""The load rule acts only while the newest GPU telemetry is at most this old: a relay that
stopped, or an agent that stopped answering, says nothing about the GPUs' load."""


def gpu_idle(snap: Snapshot) -> list[Action]:
    """RUNNING: the load rule, when set — stop (or down) a cluster whose GPUs stayed below
    ``autostop_gpu_below`` % for ``autostop_minutes``."""
    cluster = snap.cluster
    minutes, below = cluster.autostop_minutes, cluster.autostop_gpu_below
    if minutes is None or below is None or cluster.status is not ClusterStatus.RUNNING:
        return []
    seen = cluster.gpu_seen_at
    if seen is None or snap.now - seen > TELEMETRY_FRESH_S:
        return []
    marks = (cluster.gpu_active_at, cluster.status_changed_at, cluster.last_activity_at)
    since = max(mark for mark in marks if mark is not None)
    if snap.now - since < minutes * 60.0:
        return []
    why = f"autostop: GPUs below {below:g}% for {minutes} min"
    if cluster.autostop_down or not snap.can_stop:
        return [SetCluster(ClusterStatus.TERMINATING, why)]
    return [SetCluster(ClusterStatus.STOPPING, why)]


def stopping(snap: Snapshot) -> list[Action]:
    if snap.instances is None:
        return []
    actions: list[Action] = []
    to_stop: dict[str, list[str]] = defaultdict(list)
    stopped = 0
    nodes = active_nodes(snap)
    for node in nodes:
        state = snap.instance_state(node)
        if node.state is NodeState.STOPPED:
            stopped += 1
        elif snap.instance_gone(node):
            actions += terminate_nodes([node], "the provider no longer lists its instance")
        elif node.state is NodeState.STOPPING and state is InstanceState.STOPPED:
            actions.append(SetNode(node.id, NodeState.STOPPED, "the provider lists it stopped"))
            stopped += 1
        elif node.state in (NodeState.READY, NodeState.STOPPING):
            if node.state is NodeState.READY:
                actions.append(SetNode(node.id, NodeState.STOPPING, "cluster stopping"))
            if state in _UP:  # not stopping yet: (re-)issue the stop
                to_stop[node.provider].append(node.instance_id)
        else:
            actions += terminate_nodes([node], f"a {node.state.value} node cannot be stopped")
    actions = [Stop(p, tuple(ids)) for p, ids in sorted(to_stop.items())] + actions
    if stopped == len(nodes):
        actions.append(SetCluster(ClusterStatus.STOPPED, "every node is stopped"))
    return actions


def starting(snap: Snapshot) -> list[Action]:
    if snap.instances is None:
        return []
    actions: list[Action] = []
    to_start: dict[str, list[str]] = defaultdict(list)
    nodes = active_nodes(snap)
    ready = 0
    for node in nodes:
        found = snap.instances.get(node.instance_id)
        if node.state is NodeState.READY:
            ready += 1
        elif found is None or found.state in GONE:
            actions += terminate_nodes([node], "the provider no longer lists its instance")
        elif node.state in (NodeState.STOPPED, NodeState.STARTING):
            if node.state is NodeState.STOPPED:
                actions.append(SetNode(node.id, NodeState.STARTING, "cluster starting"))
            if found.state is InstanceState.STOPPED:
                to_start[node.provider].append(node.instance_id)
            if found.agent_url and found.agent_url != node.agent_url:
                actions.append(UpdateNode(node.id, found.agent_url))
            report = snap.agents.get(node.id)
            if node.state is NodeState.STARTING and report and report.liveness is Liveness.ALIVE:
                actions.append(SetNode(node.id, NodeState.READY, "agent answers"))
                ready += 1
    actions = [Start(p, tuple(ids)) for p, ids in sorted(to_start.items())] + actions
    if nodes and ready == len(nodes) == snap.cluster.target.num_nodes:
        actions += [RecordActivity(), SetCluster(ClusterStatus.SETTING_UP, "every node is up")]
    elif len(nodes) < snap.cluster.target.num_nodes:
        actions.append(SetCluster(ClusterStatus.FAILED, "a node was lost while stopped", "infra"))
    return actions


def terminating(snap: Snapshot) -> list[Action]:
    if snap.instances is None:
        return []
    actions = close_intents(snap, "cluster terminating")
    remaining: dict[str, list[str]] = defaultdict(list)
    for instance in snap.instances.values():
        if instance.state not in GONE:
            remaining[instance.provider].append(instance.id)
    for node in snap.live_nodes:
        if node.state is not NodeState.TERMINATING:
            actions.append(SetNode(node.id, NodeState.TERMINATING, "cluster terminating"))
    if remaining:
        terminate = [Terminate(p, tuple(sorted(ids))) for p, ids in sorted(remaining.items())]
        return terminate + actions
    for node in snap.live_nodes:
        actions.append(SetNode(node.id, NodeState.TERMINATED, "the provider confirms it gone"))
    return [*actions, SetCluster(ClusterStatus.TERMINATED, "the provider lists no instance")]
