"""The orphan sweep (only this owner's unclaimed instances are terminated; a launch in flight is
not an orphan) and a few rules of the pure ``decide`` function, straight from snapshots."""

from __future__ import annotations

from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import (
    AgentReport,
    ClusterView,
    LaunchDocument,
    Liveness,
    NodeView,
    Reconciler,
    Snapshot,
    decide,
)
from gpulease.controller.actions import Launch, MissedHeartbeat, SetCluster, SetNode, Terminate
from gpulease.providers.base import LaunchRequest
from gpulease.state import ClusterStatus, NodeState
from gpulease.wire import RunSpec
from tests.controller.conftest import OWNER, cluster_row, new_cluster, target
from tests.controller.doubles import FakeProvider

C = ClusterStatus


def _launch(provider: FakeProvider, request_id: str, owner: str = OWNER, cluster: str = "x") -> str:
    (inst,) = provider.launch(LaunchRequest(request_id=request_id, cluster=cluster, owner=owner))
    return inst.id


def test_the_sweep_terminates_only_this_owners_unclaimed_instances(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = new_cluster(engine, clock)
    in_flight = cluster_row(engine, cid).intents[0].request_id
    flying = _launch(provider, in_flight, cluster="c1")  # launched, nodes not recorded yet
    orphan = _launch(provider, "leaked-request")
    foreign = _launch(provider, "theirs", owner="gl-someone-else")
    assert reconciler.sweep() == [orphan]
    assert provider.terminate_calls == [[orphan]]

    reconciler.run_pass()  # the launch is recorded: its node row claims the instance now
    assert reconciler.sweep() in ([], [orphan])  # an orphan not yet gone is terminated again
    assert {flying, foreign} <= set(provider.live())


def _snapshot(status: ClusterStatus, nodes: tuple[NodeView, ...] = (), **kw: object) -> Snapshot:
    cluster = ClusterView(
        id=1, name="c", owner=OWNER, status=status, status_changed_at=0.0, target=target(),
        document=LaunchDocument(RunSpec(run="x"), (target(),)), failovers=0,
        autostop_minutes=None, autostop_down=False, last_activity_at=0.0,
    )  # fmt: skip
    return Snapshot(now=10.0, cluster=cluster, nodes=nodes, intents=(), **kw)  # type: ignore[arg-type]


def _node(state: NodeState = NodeState.READY, missed: int = 0) -> NodeView:
    return NodeView(id=7, rank=0, instance_id="i-0", provider="fake", state=state,
                    status_changed_at=0.0, agent_url="http://a", missed_heartbeats=missed,
                    last_heartbeat_at=9.0, exit_code=None)  # fmt: skip


def test_an_unanswered_poll_is_a_miss_not_a_loss() -> None:
    snap = _snapshot(C.RUNNING, (_node(),), agents={7: AgentReport(Liveness.UNKNOWN)})
    assert decide(snap) == [MissedHeartbeat(7)]
    snap = _snapshot(C.RUNNING, (_node(missed=5),), agents={7: AgentReport(Liveness.UNKNOWN)})
    actions = decide(snap)
    assert MissedHeartbeat(7) in actions
    assert any(isinstance(a, SetNode) and a.state is NodeState.LOST for a in actions)


def test_nothing_is_concluded_about_instances_the_provider_did_not_list() -> None:
    node = _node(NodeState.TERMINATING)
    assert decide(_snapshot(C.TERMINATING, (node,), instances=None)) == []
    actions = decide(_snapshot(C.TERMINATING, (node,), instances={}))
    assert actions[-1] == SetCluster(C.TERMINATED, "the provider lists no instance")


def test_a_pending_cluster_backs_off_then_launches() -> None:
    from gpulease.controller import IntentView
    from gpulease.state import IntentStatus

    intent = IntentView("r1", IntentStatus.PENDING, 1, "ProviderUnavailable: throttled")
    snap = _snapshot(C.PENDING)
    waiting = (
        Snapshot(**{**snap.__dict__, "intents": (intent,), "retry_at": 11.0}) if False else None
    )
    assert waiting is None
    base = dict(now=10.0, cluster=snap.cluster, nodes=(), intents=(intent,))
    assert decide(Snapshot(**base, retry_at=11.0)) == []  # type: ignore[arg-type]
    assert decide(Snapshot(**base, retry_at=9.0)) == [Launch("r1")]  # type: ignore[arg-type]


def test_a_provisioning_timeout_terminates_and_fails_when_no_plan_is_left() -> None:
    node = _node(NodeState.PROVISIONING)
    snap = _snapshot(C.PROVISIONING, (node,), instances={})
    late = Snapshot(now=21 * 60.0, cluster=snap.cluster, nodes=(node,), intents=(), instances={})
    actions = decide(late)
    assert Terminate("fake", ("i-0",)) in actions
    assert isinstance(actions[-1], SetCluster) and actions[-1].status is C.FAILED
