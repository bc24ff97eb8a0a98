"""Rules for a cluster being launched: PENDING → PROVISIONING → SETTING_UP.

- PENDING: send the open launch intent (:class:`Launch`); no open intent (a refused launch whose
  cluster was not moved yet) → give the target up.
- PROVISIONING: re-send the launch while the intent is PENDING or nodes are missing (idempotent
  by request id); an instance that vanishes → give the target up; nodes whose agent answers →
  READY; every node READY → intent DONE and cluster SETTING_UP.
- Timeouts (the PROVISIONING one gives the target up, the PENDING one fails the cluster) are
  :mod:`~gpulease.controller.timeouts`'.
"""

from __future__ import annotations

from gpulease.controller.actions import Action, Launch, SetCluster, SetIntent, SetNode, UpdateNode
from gpulease.controller.ports import Liveness
from gpulease.controller.rules import active_nodes, give_up_target
from gpulease.controller.snapshot import Snapshot
from gpulease.state import ClusterStatus, IntentStatus, NodeState


def _launch(snap: Snapshot, request_id: str) -> list[Action]:
    if snap.retry_at is not None and snap.now < snap.retry_at:
        return []  # backing off after a provider error
    return [Launch(request_id)]


def pending(snap: Snapshot) -> list[Action]:
    intent = snap.open_intent
    if intent is None:
        return give_up_target(snap, snap.last_error)
    return _launch(snap, intent.request_id)


def provisioning(snap: Snapshot) -> list[Action]:
    intent = snap.open_intent
    nodes = active_nodes(snap)
    missing = len(nodes) < snap.cluster.target.num_nodes
    if intent is not None and (intent.status is IntentStatus.PENDING or missing):
        return _launch(snap, intent.request_id)
    if missing:
        return give_up_target(snap, snap.last_error)
    gone = [n for n in nodes if snap.instance_gone(n)]
    if gone:
        return give_up_target(snap, f"instance {gone[0].instance_id} vanished while provisioning")
    return _agents_up(snap, intent.request_id if intent else None)


def _agents_up(snap: Snapshot, request_id: str | None) -> list[Action]:
    actions: list[Action] = []
    ready = 0
    for node in active_nodes(snap):
        found = (snap.instances or {}).get(node.instance_id)
        if found is not None and found.agent_url and found.agent_url != node.agent_url:
            actions.append(UpdateNode(node.id, found.agent_url))
        report = snap.agents.get(node.id)
        alive = report is not None and report.liveness is Liveness.ALIVE
        if node.state is NodeState.READY:
            ready += 1
        elif node.state is NodeState.PROVISIONING and alive:
            actions.append(SetNode(node.id, NodeState.READY, "agent answers"))
            ready += 1
    if ready == snap.cluster.target.num_nodes:
        if request_id is not None:
            actions.append(SetIntent(request_id, IntentStatus.DONE, "every node answers"))
        actions.append(SetCluster(ClusterStatus.SETTING_UP, "every node's agent answers"))
    return actions
