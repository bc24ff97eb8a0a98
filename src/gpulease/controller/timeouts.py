"""Enforces every timeout :data:`gpulease.state.TRANSIENT_TIMEOUTS` declares for clusters, nodes
and launch intents: the exit is the table's (a self-loop means "re-issue"), the reason its
``why`` — nothing here re-codes them. (The jobs loop enforces the job timeouts the same way in
:mod:`~gpulease.controller.job_rules`.)

- a **cluster** past its status's timeout moves to the exit: PROVISIONING → PROVISIONING gives the
  target up (failover, FAILED when no plan is left), TERMINATING → TERMINATING re-issues the
  terminate by tags; the others close open intents and move to the exit (FAILED) with the kind of
  failure the status implies;
- a **node** past its state's timeout moves to the exit: FAILED (never reachable, not stopped,
  not started), whose instance is then terminated — a failed node bills nothing — or TERMINATING
  (lost or preempted too long: terminate it; terminating too long: terminate again). A node that
  dies so while the cluster provisions gives the target up; while it sets up or runs, fails the
  cluster (``infra``: the managed-jobs loop recovers);
- an open **launch intent** past its timeout is FAILED (the cluster's rules then give its target
  up).

Pure functions of a :class:`~gpulease.controller.snapshot.Snapshot`; they return actions.
"""

from __future__ import annotations

from collections.abc import Callable

from gpulease.controller.actions import Action, SetCluster, SetIntent, SetNode, Terminate
from gpulease.controller.lifecycle import terminating
from gpulease.controller.rules import active_nodes, close_intents, give_up_target, terminate_nodes
from gpulease.controller.snapshot import NodeView, Snapshot
from gpulease.state import ClusterStatus, IntentStatus, NodeState
from gpulease.state.machines import Status, Timeout, timeout_of

_C = ClusterStatus
_N = NodeState
# the kind of failure a cluster timing out in this status is (cluster.failure)
FAILURE_KIND: dict[ClusterStatus, str] = {
    _C.PENDING: "launch",
    _C.SETTING_UP: "task",
    _C.STOPPING: "infra",
    _C.STARTING: "infra",
}
RUNS_A_TASK = frozenset({_C.SETTING_UP, _C.RUNNING})


def expired(status: Status, since: float, now: float) -> Timeout | None:
    """The timeout rule ``status`` outlived by ``now`` (entered at ``since``), else None."""
    rule = timeout_of(status)
    return rule if rule is not None and now - since >= rule.seconds else None


# ---- clusters ---------------------------------------------------------------------------------


def _reissue_terminate(snap: Snapshot, why: str) -> list[Action]:
    return [SetCluster(_C.TERMINATING, why), *terminating(snap)]


_SELF_LOOPS: dict[ClusterStatus, Callable[[Snapshot, str], list[Action]]] = {
    _C.PROVISIONING: give_up_target,
    _C.TERMINATING: _reissue_terminate,
}


def cluster_timed_out(snap: Snapshot) -> list[Action] | None:
    """The actions of a cluster whose status outlived its timeout; None when it did not."""
    cluster = snap.cluster
    rule = expired(cluster.status, cluster.status_changed_at, snap.now)
    if rule is None:
        return None
    why = f"timed out: {rule.why}"
    if rule.exit is cluster.status:
        return _SELF_LOOPS[cluster.status](snap, why)
    assert isinstance(rule.exit, ClusterStatus)
    failure = FAILURE_KIND.get(cluster.status) if rule.exit is _C.FAILED else None
    return [*close_intents(snap, why), SetCluster(rule.exit, why, failure)]


# ---- nodes and intents ------------------------------------------------------------------------


def _node_exit(node: NodeView, rule: Timeout) -> list[Action]:
    why = f"timed out: {rule.why}"
    if rule.exit is _N.TERMINATING:
        if node.state is _N.TERMINATING:  # re-issued, restamped
            return [
                SetNode(node.id, _N.TERMINATING, why),
                Terminate(node.provider, (node.instance_id,)),
            ]
        return terminate_nodes([node], why)
    return [SetNode(node.id, _N.FAILED, why), *terminate_nodes([node], f"the node failed: {why}")]


def node_timeouts(snap: Snapshot) -> tuple[list[Action], str | None]:
    """(actions for every node past its state's timeout, why the cluster lost an active node —
    None when it lost none)."""
    actions: list[Action] = []
    lost: str | None = None
    active = {n.id for n in active_nodes(snap)}
    for node in snap.live_nodes:
        rule = expired(node.state, node.status_changed_at, snap.now)
        if rule is None or (node.state is _N.TERMINATING and snap.instance_gone(node)):
            continue  # (a terminating node confirmed gone is confirmed by the rules)
        actions += _node_exit(node, rule)
        if node.id in active and lost is None:
            lost = (
                f"node {node.rank} ({node.instance_id}) {node.state.value}: timed out: {rule.why}"
            )
    return actions, lost


def intent_timeouts(snap: Snapshot) -> list[Action]:
    """Open launch intents past their timeout → their exit (FAILED)."""
    actions: list[Action] = []
    for intent in snap.intents:
        rule = expired(intent.status, intent.status_changed_at, snap.now) if intent.open else None
        if rule is not None:
            assert isinstance(rule.exit, IntentStatus)
            actions.append(SetIntent(intent.request_id, rule.exit, f"timed out: {rule.why}"))
    return actions


def lost_node_actions(snap: Snapshot, why: str, fail_running: Callable[[Snapshot, str],
                      list[Action]]) -> list[Action]:  # fmt: skip
    """How the cluster reacts to losing an active node to a timeout: provisioning gives the
    target up; setting up or running fails the cluster (``fail_running``); else nothing more."""
    if snap.cluster.status is _C.PROVISIONING:
        return give_up_target(snap, why)
    if snap.cluster.status in RUNS_A_TASK:
        return fail_running(snap, why)
    return []
