"""Every timeout ``gpulease.state.TRANSIENT_TIMEOUTS`` declares is enforced, with the table's exit:
each entry of the table (clusters, nodes, launch intents, managed jobs) is reached here, straight
from snapshots through the pure ``decide`` / ``decide_job`` — a new entry in the table is tested
without a new test. Then one on the real loop: a node lost for too long fails its cluster."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import (
    ClusterView,
    IntentView,
    LaunchDocument,
    NodeView,
    Reconciler,
    Snapshot,
    decide,
)
from gpulease.controller.actions import FailOver, SetCluster, SetIntent, SetNode, Terminate
from gpulease.controller.job_rules import EndAttempt, Recover, SetJob, decide_job
from gpulease.providers.base import Instance, InstanceState
from gpulease.state import (
    TRANSIENT_TIMEOUTS,
    ClusterStatus,
    IntentStatus,
    JobStatus,
    NodeState,
    session_scope,
)
from gpulease.state.machines import Timeout
from gpulease.state.models import Node
from gpulease.wire import RunSpec
from tests.controller.conftest import OWNER, new_cluster, target
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.controller.test_job_rules import make_attempt
from tests.controller.test_job_rules import snap as job_snap

C, N, J = ClusterStatus, NodeState, JobStatus
RUNNING_I0 = {"i-0": Instance("i-0", "fake", InstanceState.RUNNING, {})}


def _entries(enum: type) -> list[Any]:
    return [pytest.param(s, r, id=s.value) for s, r in TRANSIENT_TIMEOUTS[enum].items()]


def _cluster(status: ClusterStatus, since: float, plans: int = 2) -> ClusterView:
    doc = LaunchDocument(RunSpec(run="x"), tuple(target(f"r{i}") for i in range(plans)))
    return ClusterView(
        id=1, name="c", owner=OWNER, status=status, status_changed_at=since, target=target(),
        document=doc, failovers=0, autostop_minutes=None, autostop_down=False,
        last_activity_at=since,
    )  # fmt: skip


def _node(state: NodeState, since: float) -> NodeView:
    return NodeView(id=7, rank=0, instance_id="i-0", provider="fake", state=state,
                    status_changed_at=since, agent_url="http://a", missed_heartbeats=0,
                    last_heartbeat_at=since, exit_code=None)  # fmt: skip


@pytest.mark.parametrize(("status", "rule"), _entries(ClusterStatus))
def test_every_cluster_timeout_takes_the_tables_exit(status: ClusterStatus, rule: Timeout) -> None:
    young = Snapshot(now=rule.seconds - 1.0, cluster=_cluster(status, 0.0), nodes=(), intents=(),
                     instances={})  # fmt: skip
    assert not [a for a in decide(young) if isinstance(a, SetCluster) and "timed out" in a.reason]
    snap = dataclasses.replace(young, now=rule.seconds)
    actions = decide(snap)
    if status is C.PROVISIONING:  # the self-loop: give the target up for the next plan
        assert any(isinstance(a, FailOver) and rule.why in a.error for a in actions), actions
        return
    moves = [a for a in actions if isinstance(a, SetCluster)]
    assert moves[0].status is rule.exit and rule.why in moves[0].reason, actions
    if rule.exit is C.FAILED:
        assert moves[0].failure in ("launch", "task", "infra")


def test_a_provisioning_timeout_without_a_next_plan_fails_the_cluster() -> None:
    rule = TRANSIENT_TIMEOUTS[ClusterStatus][C.PROVISIONING]
    snap = Snapshot(now=rule.seconds, cluster=_cluster(C.PROVISIONING, 0.0, plans=1), nodes=(),
                    intents=(), instances={})  # fmt: skip
    assert SetCluster(C.FAILED, f"no offer left to try: timed out: {rule.why}", "launch") in (
        decide(snap)
    )


@pytest.mark.parametrize(("state", "rule"), _entries(NodeState))
@pytest.mark.parametrize("cluster", [C.RUNNING, C.SUCCEEDED, C.PROVISIONING])
def test_every_node_timeout_takes_the_tables_exit(
    state: NodeState, rule: Timeout, cluster: ClusterStatus
) -> None:
    node = _node(state, 0.0)
    snap = Snapshot(now=rule.seconds, cluster=_cluster(cluster, rule.seconds - 1.0),
                    nodes=(node,), intents=(), instances=RUNNING_I0)  # fmt: skip
    actions = decide(snap)
    assert Terminate("fake", ("i-0",)) in actions, actions  # whatever the exit: it bills no more
    moved = [a for a in actions if isinstance(a, SetNode) and a.node_id == 7]
    assert moved[0].state is rule.exit and rule.why in moved[0].reason, actions
    if rule.exit is N.FAILED:
        assert moved[1].state is N.TERMINATING  # a failed node is terminated at once
    active = state is not N.TERMINATING
    failed = [a for a in actions if isinstance(a, SetCluster) and a.status is C.FAILED]
    if active and cluster is C.RUNNING:
        assert failed and failed[0].failure == "infra" and rule.why in failed[0].reason
    elif active and cluster is C.PROVISIONING:
        assert any(isinstance(a, FailOver) for a in actions)
    else:
        assert not failed


@pytest.mark.parametrize(("status", "rule"), _entries(IntentStatus))
def test_every_open_intent_timeout_takes_the_tables_exit(
    status: IntentStatus, rule: Timeout
) -> None:
    intent = IntentView("req-1", status, 1, None, status_changed_at=0.0)
    snap = Snapshot(now=rule.seconds, cluster=_cluster(C.PROVISIONING, rule.seconds - 1.0),
                    nodes=(), intents=(intent,), instances={})  # fmt: skip
    assert decide(snap) == [SetIntent("req-1", rule.exit, f"timed out: {rule.why}")]  # type: ignore[arg-type]


@pytest.mark.parametrize(("status", "rule"), _entries(JobStatus))
def test_every_job_timeout_takes_the_tables_exit(status: JobStatus, rule: Timeout) -> None:
    current = make_attempt(C.PROVISIONING)
    actions = decide_job(job_snap(status, current, now=rule.seconds, status_changed_at=0.0))
    assert EndAttempt(f"timed out: {rule.why}") in actions or status is J.CANCELLING, actions
    if rule.exit is J.RECOVERING:
        assert Recover("launch", f"timed out: {rule.why}") in actions
    else:
        sets = [a for a in actions if isinstance(a, SetJob)]
        assert sets and sets[0].status is rule.exit and rule.why in sets[0].reason, actions
    young = job_snap(status, current, now=rule.seconds - 1.0, status_changed_at=0.0)
    assert not [a for a in decide_job(young) if "timed out" in str(a)]


def test_a_node_lost_for_too_long_fails_its_running_cluster_on_the_real_loop(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock)
    for _ in range(8):
        reconciler.run_pass()
    with session_scope(engine) as session:
        (node,) = session.query(Node).filter_by(cluster_id=cid).all()
        node_id, instance_id = node.id, node.instance_id
    agents[instance_id].alive = False
    for _ in range(8):  # six misses make it LOST
        reconciler.run_pass()
    clock.advance(TRANSIENT_TIMEOUTS[NodeState][N.LOST].seconds)
    reconciler.run_pass()
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None and node.state in (N.TERMINATING, N.TERMINATED)
        assert node.cluster.status is C.FAILED and node.cluster.failure == "infra"
