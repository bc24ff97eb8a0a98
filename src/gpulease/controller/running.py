"""Rules for a cluster whose nodes are up: SETTING_UP → RUNNING → SUCCEEDED | FAILED, and node
liveness.

- Liveness (DESIGN 7): an agent that answers is ALIVE (a LOST node comes back READY); one that
  does not is UNKNOWN and counts as alive — a READY node becomes LOST only after
  ``lost_after_missed`` polls in a row miss. A node whose instance the provider confirms gone is
  dead: the cluster FAILS (recovery is the managed-jobs loop's business, not this one); one that
  stays LOST past its timeout is terminated by :mod:`~gpulease.controller.timeouts`, with the
  same end.
- SETTING_UP: submit the task to every READY node that does not have it (the agent is idempotent
  by task id and attempt); RUNNING once every node's task has started; FAILED at once when a
  node's task fails.
- RUNNING: SUCCEEDED when every node's task succeeded; FAILED when any failed, was cancelled or
  preempted (the other nodes' tasks are cancelled). Exit codes are recorded per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpulease.controller.actions import (
    Action,
    CancelTask,
    Heartbeat,
    MissedHeartbeat,
    RecordActivity,
    RecordExit,
    SetCluster,
    SetNode,
    SubmitTask,
)
from gpulease.controller.document import node_task
from gpulease.controller.ports import Liveness
from gpulease.controller.rules import (
    ReconcileConfig,
    active_nodes,
    agent_ports,
    node_ips,
    terminate_nodes,
)
from gpulease.controller.snapshot import NodeView, Snapshot
from gpulease.state import ClusterStatus, NodeState
from gpulease.wire import STARTED, TERMINAL, TaskState


def liveness(snap: Snapshot, config: ReconcileConfig) -> tuple[list[Action], str | None]:
    """Heartbeat bookkeeping for the active nodes; the reason the cluster lost a node, if it
    did."""
    actions: list[Action] = []
    dead: str | None = None
    for node in active_nodes(snap):
        if snap.instance_gone(node):
            actions += terminate_nodes([node], "the provider no longer lists its instance")
            dead = dead or f"node {node.rank} ({node.instance_id}) is gone"
            continue
        actions += _heartbeat(snap, node, config)
    return actions, dead


def _heartbeat(snap: Snapshot, node: NodeView, config: ReconcileConfig) -> list[Action]:
    report = snap.agents.get(node.id)
    if report is None:
        return []
    if report.liveness is Liveness.ALIVE:
        actions: list[Action] = []
        if node.state is NodeState.LOST:
            actions.append(SetNode(node.id, NodeState.READY, "agent answers again"))
        stale = node.last_heartbeat_at is None or (
            snap.now - node.last_heartbeat_at >= config.heartbeat_write_s
        )
        if node.missed_heartbeats or stale:
            actions.append(Heartbeat(node.id))
        return actions
    missed: list[Action] = [MissedHeartbeat(node.id)]
    if node.state is NodeState.READY and node.missed_heartbeats + 1 >= config.lost_after_missed:
        why = f"{node.missed_heartbeats + 1} agent polls missed in a row"
        missed.append(SetNode(node.id, NodeState.LOST, why))
    return missed


def _task_states(snap: Snapshot, nodes: Sequence[NodeView]) -> list[TaskState | None]:
    states: list[TaskState | None] = []
    for node in nodes:
        report = snap.agents.get(node.id)
        alive = report is not None and report.liveness is Liveness.ALIVE
        states.append(report.task_state if alive and report is not None else None)
    return states


def _finish(
    snap: Snapshot,
    nodes: Sequence[NodeView],
    status: ClusterStatus,
    why: str,
    failure: str | None = None,
    *,
    task_failure: dict[str, Any] | None = None,
) -> list[Action]:
    actions: list[Action] = []
    for node in nodes:
        report = snap.agents.get(node.id)
        if report is None or report.task_state not in TERMINAL:
            if status is ClusterStatus.FAILED and report is not None and report.task_state:
                actions.append(CancelTask(node.id))
            continue
        if report.exit_code is not None and report.exit_code != node.exit_code:
            actions.append(RecordExit(node.id, report.exit_code))
    return [*actions, RecordActivity(), SetCluster(status, why, failure, task_failure)]


def _failure(
    snap: Snapshot, nodes: Sequence[NodeView], states: list[TaskState | None]
) -> tuple[str, str, dict[str, Any] | None] | None:
    """(why, kind, task failure) of the first task that ended badly: ``infra`` when any node's
    task was preempted (a notice, or exit 75 — "checkpoint taken, resume me"), else ``task``
    with where it failed (:class:`SetCluster`'s ``task_failure``). A preempted node wins over a
    failed one (in a multi-node job the survivors fail when a peer goes), a failed one over a
    cancelled one."""
    found: list[tuple[int, str, str, dict[str, Any] | None]] = []
    for node, state in zip(nodes, states, strict=True):
        if state in TERMINAL and state is not TaskState.SUCCEEDED:
            report = snap.agents[node.id]
            code = f" (exit code {report.exit_code})" if report.exit_code is not None else ""
            detail = f": {report.detail}" if report.detail else ""
            why = f"the task on node {node.rank} ended {state}{code}{detail}"
            if state is TaskState.PREEMPTED:
                found.append((0, why, "infra", None))
            else:
                where = {"rank": node.rank, "state": state.value, "step": report.step,
                         "exit_code": report.exit_code, "signal": report.signal,
                         "detail": report.detail}  # fmt: skip
                found.append((1 if state is TaskState.FAILED else 2, why, "task", where))
    found.sort(key=lambda f: f[0])
    return found[0][1:] if found else None


def _checked(
    snap: Snapshot, config: ReconcileConfig
) -> tuple[list[Action], Sequence[NodeView], list[TaskState | None], list[Action] | None]:
    """(liveness actions, active nodes, their task states, and — when a node is dead or a task
    failed — the actions that fail the cluster, else None): the checks every running phase
    starts with."""
    actions, dead = liveness(snap, config)
    nodes = active_nodes(snap)
    if dead:
        failing = _finish(snap, nodes, ClusterStatus.FAILED, dead, "infra")
        return actions, nodes, [], [*actions, *failing]
    states = _task_states(snap, nodes)
    failed = _failure(snap, nodes, states)
    if failed:
        why, kind, where = failed
        return (
            actions,
            nodes,
            states,
            [*actions, *_finish(snap, nodes, ClusterStatus.FAILED, why, kind, task_failure=where)],
        )
    return actions, nodes, states, None


def setting_up(snap: Snapshot, config: ReconcileConfig) -> list[Action]:
    actions, nodes, states, failing = _checked(snap, config)
    if failing is not None:
        return failing
    if len(nodes) == snap.cluster.target.num_nodes and all(s in STARTED for s in states):
        return [*actions, SetCluster(ClusterStatus.RUNNING, "the task runs on every node")]
    return actions + _submissions(snap, nodes)


def _submissions(snap: Snapshot, nodes: Sequence[NodeView]) -> list[Action]:
    cluster = snap.cluster
    ips = node_ips(snap, nodes)
    ports = agent_ports(nodes, ips) if len(nodes) == len(ips) > 1 else ()
    actions: list[Action] = []
    for node in nodes:
        report = snap.agents.get(node.id)
        if node.state is not NodeState.READY or report is None:
            continue
        if report.liveness is not Liveness.ALIVE or report.task_state is not None:
            continue
        task = node_task(
            cluster.document,
            task_id=cluster.task_id,
            rank=node.rank,
            node_ips=ips,
            gpus_per_node=cluster.target.gpus_per_node,
            agent_ports=ports,
            accelerator=cluster.target.accelerator,
        )
        actions.append(SubmitTask(node.id, task))
    return actions


def running(snap: Snapshot, config: ReconcileConfig) -> list[Action]:
    actions, nodes, states, failing = _checked(snap, config)
    if failing is not None:
        return failing
    if nodes and all(s is TaskState.SUCCEEDED for s in states):
        why = "the task succeeded on every node"
        return [*actions, *_finish(snap, nodes, ClusterStatus.SUCCEEDED, why)]
    return actions


def fail_running(snap: Snapshot, why: str) -> list[Action]:
    """A cluster setting up or running lost a node: FAILED (``infra``), the other nodes' tasks
    cancelled."""
    return _finish(snap, active_nodes(snap), ClusterStatus.FAILED, why, "infra")
