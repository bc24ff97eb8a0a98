"""A spot replica's preemption through the real loops on a real DB: the events relay, the cluster
loop and the services loop (with the server's real load balancers), over the in-memory provider
and agents. A notice marks the replica's node PREEMPTED without telling its agent (the app keeps
serving what it has in flight), the services loop drains it at once, launches its replacement
on-demand and holds spot in the service's memory; the replica is terminated once drained.
When the node has moved on before the services loop looks, its history still starts the hold,
and so does a spot replica's cluster failed for the infrastructure (its agent stopped the app on
its own notice). A job's node still gets the notice through its agent."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select

from gpulease.clock import VirtualClock
from gpulease.controller import LoopSettings, Reconciler
from gpulease.controller.job_events import EventRelay
from gpulease.controller.service_document import ServiceDocument, ServiceSettings
from gpulease.controller.service_loop import ServiceReconciler
from gpulease.controller.service_observe import HttpProbe
from gpulease.controller.service_rules import SPOT_HOLD_S, spot_hold
from gpulease.providers.base import EventKind, ProviderEvent
from gpulease.server.endpoints import Endpoints
from gpulease.state import (
    Cluster,
    ClusterStatus,
    LaunchTarget,
    Node,
    NodeState,
    Service,
    ServiceStatus,
    history,
    session_scope,
    set_status,
)
from gpulease.state.status import record_created
from gpulease.wire import RunSpec
from tests.controller.conftest import OWNER, new_cluster, target
from tests.controller.doubles import FakeAgents, FakeProvider

_C = ClusterStatus
SPOT = LaunchTarget(provider="fake", region="r1", instance_type="t1", pricing="spot")


class Answering(HttpProbe):
    """Every replica answers its readiness probe (the replicas here are the doubles' agents)."""

    def __call__(self, url: str, settings: ServiceSettings) -> bool:
        return True


@pytest.fixture
def endpoints() -> Iterator[Endpoints]:
    found = Endpoints()
    yield found
    found.close_all()


@pytest.fixture
def services(
    engine: Engine, provider: FakeProvider, endpoints: Endpoints, clock: VirtualClock
) -> Iterator[ServiceReconciler]:
    loop = ServiceReconciler(engine, {provider.name: provider}, endpoints, clock=clock,
                             owner=OWNER, settings=LoopSettings(resting_every_s=0.0),
                             probe=Answering())  # fmt: skip
    yield loop
    loop.close()


@pytest.fixture
def relay(
    engine: Engine, provider: FakeProvider, agents: FakeAgents, clock: VirtualClock
) -> EventRelay:
    return EventRelay(engine, {provider.name: provider}, agents, clock=clock, grace_s=30.0)


class World:
    def __init__(
        self, engine: Engine, clock: VirtualClock, relay: EventRelay, clusters: Reconciler,
        services: ServiceReconciler,
    ) -> None:  # fmt: skip
        self.engine, self.clock, self.relay = engine, clock, relay
        self.clusters, self.services = clusters, services
        self.id = _service(engine, clock)

    def step(self, passes: int = 1) -> None:
        for _ in range(passes):
            self.relay.relay()
            self.clusters.run_pass()
            self.services.run_pass()
            self.clock.advance(1.0)

    def replicas(self) -> list[Cluster]:
        with session_scope(self.engine) as session:
            stmt = select(Cluster).where(Cluster.service_id == self.id).order_by(Cluster.id)
            return list(session.scalars(stmt))

    def serving(self) -> frozenset[int]:
        return self.services.backends.get(self.id, frozenset())

    def node(self, cluster_id: int) -> Node:
        with session_scope(self.engine) as session:
            found = session.scalars(select(Node).where(Node.cluster_id == cluster_id)).one()
            return found

    def memory(self) -> dict[str, object]:
        with session_scope(self.engine) as session:
            row = session.get(Service, self.id)
            assert row is not None
            return dict(row.autoscale)

    def settled(self) -> Cluster:
        """Both replicas running and behind the endpoint; the spot one."""
        self.step(12)
        replicas = self.replicas()
        assert [r.status for r in replicas] == [_C.RUNNING, _C.RUNNING]
        assert self.serving() == {r.id for r in replicas}
        (spot,) = [r for r in replicas if r.pricing == "spot"]
        return spot


def _service(engine: Engine, clock: VirtualClock) -> int:
    settings = ServiceSettings(min_replicas=2, max_replicas=2, on_demand_base=1, spot_share=1.0,
                               probe_initial_delay_s=0.0)  # fmt: skip
    policy = {"min_replicas": 2, "max_replicas": 2, "on_demand_base": 1, "spot_share": 1.0}
    doc = ServiceDocument(run=RunSpec(run="python app.py"), settings=settings, policy=policy,
                          spot=(SPOT,), on_demand=(target(),))  # fmt: skip
    now = clock.now()
    with session_scope(engine) as session:
        row = Service(name="web", owner=OWNER, status=ServiceStatus.PENDING,
                      status_changed_at=now, task=doc.to_json(), version=1, endpoint_port=None,
                      desired_replicas=2, autoscale={}, decisions=[], created_at=now,
                      updated_at=now)  # fmt: skip
        record_created(session, row, actor="test", reason="serve up")
        return row.id


@pytest.fixture
def world(
    engine: Engine, clock: VirtualClock, relay: EventRelay, reconciler: Reconciler,
    services: ServiceReconciler,
) -> World:  # fmt: skip
    return World(engine, clock, relay, reconciler, services)


def _event(kind: EventKind, instance_id: str, clock: VirtualClock) -> ProviderEvent:
    return ProviderEvent(kind, clock.now(), instance_id, "r1", detail="spot capacity reclaimed")


def test_a_notice_drains_the_spot_replica_and_replaces_it_on_demand_then_lets_it_go(
    world: World, provider: FakeProvider, agents: FakeAgents, endpoints: Endpoints,
    clock: VirtualClock,
) -> None:  # fmt: skip
    spot = world.settled()
    iid = world.node(spot.id).instance_id
    provider.events.append(_event(EventKind.PREEMPTION_NOTICE, iid, clock))
    noticed = clock.now()
    world.step()
    assert world.node(spot.id).state is NodeState.PREEMPTED
    assert agents[iid].preempts == []  # its app was not stopped: it finishes what it has
    assert endpoints.replica_state(world.id, spot.id) == "draining"  # no new request
    replicas = world.replicas()
    assert [r.pricing for r in replicas] == ["on_demand", "spot", "on_demand"]
    assert world.memory()["spot_unavailable_until"] == noticed + SPOT_HOLD_S
    world.step(12)  # drained, it goes; the replacement joins
    replacement = replicas[-1].id
    assert world.serving() == {replicas[0].id, replacement}
    statuses = [r.status for r in world.replicas()]
    assert statuses[0] is statuses[2] is _C.RUNNING and statuses[1] is _C.TERMINATED
    with session_scope(world.engine) as session:
        row = session.get(Cluster, spot.id)
        assert row is not None
        moves = [(c.to_status, c.actor, c.reason) for c in history(session, row)]
    assert ("terminating", "services", "replaced: a preemption notice: drained") in moves
    assert len(provider.launch_calls) == 3  # no spot relaunch into the outage
    clock.advance(noticed + SPOT_HOLD_S - 30 - clock.now())
    world.step(2)  # late in the hold: the passes keep it, they do not extend it
    assert world.memory()["spot_unavailable_until"] == noticed + SPOT_HOLD_S
    clock.advance(30)  # the hold is over: spot is usable again
    snap = world.services.snapshot(world.id)
    assert snap is not None and snap.spot_available
    assert spot_hold(snap.now, snap.replicas, snap.spot_held_until) is None


def test_the_hold_starts_from_the_history_once_the_node_has_moved_on(
    world: World, provider: FakeProvider, clock: VirtualClock
) -> None:
    spot = world.settled()
    iid = world.node(spot.id).instance_id
    provider.vanish(iid)  # taken, no notice seen in time
    provider.events.append(_event(EventKind.PREEMPTED, iid, clock))
    taken = clock.now()
    world.relay.relay()
    with session_scope(world.engine) as session:  # moved on before the services loop looked
        node = session.get(Node, world.node(spot.id).id)
        assert node is not None and node.state is NodeState.PREEMPTED
        assert set_status(session, node, NodeState.TERMINATING, actor="test",
                          reason="terminate sent", now=clock.now())  # fmt: skip
    world.step()
    assert world.memory()["spot_unavailable_until"] == taken + SPOT_HOLD_S
    assert [r.pricing for r in world.replicas()] == ["on_demand", "spot", "on_demand"]


def test_the_hold_starts_when_the_agent_stopped_the_app_and_the_cluster_failed_first(
    world: World, agents: FakeAgents, clock: VirtualClock
) -> None:
    spot = world.settled()
    iid = world.node(spot.id).instance_id
    agents[iid].state = "PREEMPTED"  # the agent read the notice itself (EC2 instance metadata)
    world.clusters.run_pass()  # the cluster loop first: FAILED, infra
    failed = world.replicas()[1]
    assert (failed.status, failed.failure) == (_C.FAILED, "infra")
    assert world.node(spot.id).state is NodeState.READY  # no node was marked
    world.services.run_pass()
    assert world.memory()["spot_unavailable_until"] == failed.status_changed_at + SPOT_HOLD_S
    assert [r.pricing for r in world.replicas()] == ["on_demand", "spot", "on_demand"]


def test_a_jobs_node_still_gets_the_notice_through_its_agent(
    world: World, provider: FakeProvider, agents: FakeAgents, clock: VirtualClock
) -> None:
    engine, reconciler, relay = world.engine, world.clusters, world.relay
    cid = new_cluster(engine, clock, plans=(SPOT,))
    for _ in range(8):
        reconciler.run_pass()
        clock.advance(1.0)
    with session_scope(engine) as session:
        node = session.scalars(select(Node).where(Node.cluster_id == cid)).one()
        iid = node.instance_id
    provider.events.append(_event(EventKind.PREEMPTION_NOTICE, iid, clock))
    assert relay.relay()
    assert [grace for _task, grace in agents[iid].preempts] == [30.0]
    with session_scope(engine) as session:
        node = session.scalars(select(Node).where(Node.cluster_id == cid)).one()
        assert node.state is NodeState.READY
