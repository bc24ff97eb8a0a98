"""The services loop's pure decision in virtual time: a failed or lost replica is replaced
(on-demand while spot is unavailable), a spot replica's preemption notice drains it, replaces it
at once on-demand and holds spot for ``SPOT_HOLD_S`` (also when the cluster loop got there first),
a replica failing readiness is drained then replaced, a
rolling update never has fewer ready replicas than before, scale-down and ``serve down`` drain
before they terminate, and nothing is left at DOWN. The world below is the test's own model of
the cluster loop and the load balancer: clusters boot in ``boot`` ticks, drains take
``drain_ticks``; every action of ``decide_service`` is carried out on it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpulease.controller.service_document import ServiceSettings
from gpulease.controller.service_rules import (
    DRAIN_TIMEOUT_S,
    FAIL_AFTER,
    PROBE_FAILURES,
    SPOT_HOLD_S,
    CloseEndpoint,
    HoldSpot,
    Launch,
    RecordScale,
    ReplicaSnap,
    Retire,
    ScaleInput,
    ServiceAction,
    ServiceSnap,
    SetBackends,
    SetService,
    Terminate,
    decide_service,
)
from gpulease.state import ClusterStatus, ServiceStatus

_C = ClusterStatus
_S = ServiceStatus


@dataclass
class World:
    settings: ServiceSettings = field(
        default_factory=lambda: ServiceSettings(min_replicas=2, max_replicas=4)
    )
    status: ServiceStatus = _S.PENDING
    version: int = 1
    desired: int = 2
    now: float = 0.0
    boot: int = 3
    boot_ready: bool = True  # False: replicas come up failing their readiness probe
    drain_ticks: int = 2
    replicas: dict[int, ReplicaSnap] = field(default_factory=dict)
    launched_at: dict[int, float] = field(default_factory=dict)
    backends: frozenset[int] = frozenset()
    log: list[ServiceAction] = field(default_factory=list)
    ready_seen: list[int] = field(default_factory=list)
    terminated_before_drained: list[int] = field(default_factory=list)
    spot_available: bool = True
    spot_held_until: float | None = None  # the service's memory
    failures: int = 0
    next_id: int = 1

    def snap(self, scale: ScaleInput | None = None) -> ServiceSnap:
        return ServiceSnap(
            now=self.now, id=1, name="web", status=self.status, version=self.version,
            desired=self.desired, settings=self.settings, replicas=tuple(self.replicas.values()),
            backends=self.backends, scale=scale, spot_available=self.spot_available,
            spot_held_until=self.spot_held_until, failures_in_a_row=self.failures,
        )  # fmt: skip

    def tick(self, scale: ScaleInput | None = None) -> list[ServiceAction]:
        self._world_moves()
        actions = decide_service(self.snap(scale))
        for action in actions:
            self._apply(action)
        self.log += actions
        self.ready_seen.append(sum(1 for r in self.replicas.values() if r.id in self.backends
                                   and r.ready and r.retiring is None))  # fmt: skip
        self.now += 1.0
        return actions

    def _world_moves(self) -> None:
        for rid, r in list(self.replicas.items()):
            if r.status is _C.TERMINATING:
                self.replicas[rid] = replace(r, status=_C.TERMINATED)
            elif r.status is _C.PROVISIONING and self.now - self.launched_at[rid] >= self.boot:
                self.replicas[rid] = replace(
                    r,
                    status=_C.RUNNING,
                    running_since=self.now,
                    url=f"http://127.0.0.1:{9000 + rid}",
                    ready=self.boot_ready,
                    probe_failures=0 if self.boot_ready else PROBE_FAILURES,
                )
            elif r.retiring is not None and r.drain_started_at is not None:
                done = self.now - r.drain_started_at >= self.drain_ticks
                self.replicas[rid] = replace(r, drained=done)

    def _apply(self, a: ServiceAction) -> None:
        if isinstance(a, SetService):
            self.status = a.status
        elif isinstance(a, RecordScale):
            self.desired = a.desired
        elif isinstance(a, HoldSpot):
            self.spot_held_until = max(a.until, self.spot_held_until or a.until)
        elif isinstance(a, Launch):
            rid, self.next_id = self.next_id, self.next_id + 1
            self.replicas[rid] = ReplicaSnap(
                id=rid, index=rid, version=self.version, status=_C.PROVISIONING, spot=a.spot
            )
            self.launched_at[rid] = self.now
        elif isinstance(a, Retire):
            r = self.replicas[a.replica]
            self.replicas[a.replica] = replace(r, retiring=a.reason, drain_started_at=self.now)
        elif isinstance(a, Terminate):
            r = self.replicas[a.replica]
            if r.retiring is not None and not r.drained and a.replica in self.backends:
                self.terminated_before_drained.append(a.replica)
            self.failures += 1 if a.failed else 0
            self.replicas[a.replica] = replace(r, status=_C.TERMINATING)
        elif isinstance(a, SetBackends):
            self.backends = frozenset(a.replicas)

    def run(self, ticks: int, scale: ScaleInput | None = None) -> None:
        for _ in range(ticks):
            self.tick(scale)

    def live(self) -> list[ReplicaSnap]:
        return [r for r in self.replicas.values() if r.status not in (_C.TERMINATING,
                                                                       _C.TERMINATED)]  # fmt: skip

    def serving(self) -> list[ReplicaSnap]:
        return [r for r in self.live() if r.id in self.backends and r.retiring is None]


def _started() -> World:
    world = World()
    world.run(6)
    assert world.status is _S.READY and len(world.serving()) == 2
    return world


def test_a_new_service_launches_its_replicas_and_admits_them_once_ready() -> None:
    world = World()
    first = world.tick()
    assert [type(a) for a in first] == [Launch, Launch, SetService]
    assert world.status is _S.STARTING and not world.backends
    world.run(5)
    assert world.status is _S.READY and world.backends == {1, 2}
    assert world.tick() == []  # steady: nothing to do


def test_a_failed_replica_is_terminated_and_replaced() -> None:
    world = _started()
    world.replicas[1] = replace(world.replicas[1], status=_C.FAILED)
    actions = world.tick()
    assert Terminate(1, "replaced: its cluster is failed", failed=True) in actions
    assert any(isinstance(a, Launch) for a in actions)
    assert 1 not in world.backends
    world.run(5)
    assert len(world.serving()) == 2 and 1 not in {r.id for r in world.live()}


def test_a_lost_spot_replica_is_replaced_on_demand_while_the_provider_has_no_spot() -> None:
    world = World(settings=ServiceSettings(min_replicas=3, max_replicas=3, on_demand_base=1,
                                           spot_share=1.0), desired=3)  # fmt: skip
    world.run(6)
    assert sorted(r.spot for r in world.serving()) == [False, True, True]
    spot = next(r for r in world.serving() if r.spot)
    world.replicas[spot.id] = replace(spot, node_lost=True)
    world.spot_available = False
    actions = world.tick()
    assert Terminate(spot.id, "replaced: its node was lost", failed=True) in actions
    assert Launch(False, "2 of 3 replicas (version 1)") in actions
    assert not any(isinstance(a, Launch) and a.spot for a in actions)
    world.run(5)
    assert sorted(r.spot for r in world.serving()) == [False, False, True]


def _spot_pair() -> tuple[World, ReplicaSnap]:
    world = World(settings=ServiceSettings(min_replicas=2, max_replicas=4, on_demand_base=1,
                                           spot_share=1.0))  # fmt: skip
    world.run(6)
    assert sorted(r.spot for r in world.serving()) == [False, True]
    return world, next(r for r in world.serving() if r.spot)


def test_a_preemption_notice_drains_the_spot_replica_and_replaces_it_on_demand_at_once() -> None:
    world, spot = _spot_pair()
    noticed = world.now
    world.replicas[spot.id] = replace(spot, preempted_at=noticed)  # its node PREEMPTED, still up
    actions = world.tick()
    assert Retire(spot.id, "replaced: a preemption notice") in actions  # out of rotation now
    assert Launch(False, "1 of 2 replicas (version 1)") in actions  # the hold: on-demand
    assert HoldSpot(noticed + SPOT_HOLD_S, f"spot replica {spot.index} preempted: replacements "
                    f"on-demand until {noticed + SPOT_HOLD_S:.0f}") in actions  # fmt: skip
    assert not any(isinstance(a, Terminate) for a in actions)
    world.run(2)  # drained (nothing in flight any more): it serves nothing, so it goes
    assert Terminate(spot.id, "replaced: a preemption notice: drained") in world.log
    world.run(4)
    assert sorted(r.spot for r in world.serving()) == [False, False]
    assert world.terminated_before_drained == [] and world.failures == 0  # not a failure
    assert min(world.ready_seen[6:]) >= 1  # the on-demand one carried the load meanwhile
    assert sum(isinstance(a, HoldSpot) for a in world.log) == 1  # kept, not written each pass


def test_a_draining_replica_whose_cluster_ends_is_terminated_at_once() -> None:
    world = World(settings=ServiceSettings(min_replicas=1, max_replicas=4), drain_ticks=10_000)
    world.run(6, ScaleInput(2, "steady"))
    world.tick(ScaleInput(1, "quiet"))
    (retiring,) = [r for r in world.live() if r.retiring is not None]
    world.replicas[retiring.id] = replace(retiring, status=_C.FAILED)
    actions = world.tick(ScaleInput(1, "quiet"))
    assert Terminate(retiring.id, f"{retiring.retiring}: its cluster is failed") in actions


def test_the_spot_hold_applies_when_the_cluster_loop_got_there_first_and_then_ends() -> None:
    world, spot = _spot_pair()
    taken = world.now
    # no notice seen in time: the cluster failed (its node PREEMPTED in the history)
    world.replicas[spot.id] = replace(spot, status=_C.FAILED, preempted_at=taken)
    actions = world.tick()
    assert Terminate(spot.id, "replaced: its node was preempted") in actions
    assert [a.spot for a in actions if isinstance(a, Launch)] == [False]
    assert world.spot_held_until == taken + SPOT_HOLD_S
    world.run(6)  # the preempted replica is gone; the hold is the memory's
    assert spot.id not in {r.id for r in world.live()}
    world.run(4, ScaleInput(3, "load above 0.8"))
    assert sorted(r.spot for r in world.serving()) == [False, False, False]
    world.now = taken + SPOT_HOLD_S  # the hold is over: spot again on the next scale-up
    world.run(6, ScaleInput(4, "load above 0.8"))
    assert sorted(r.spot for r in world.serving()) == [False, False, False, True]


def test_a_replica_failing_readiness_is_drained_then_replaced() -> None:
    world = _started()
    world.replicas[2] = replace(world.replicas[2], ready=False, probe_failures=3)
    actions = world.tick()
    assert Retire(2, "replaced: failed its readiness probe 3 times", failed=True) in actions
    assert not any(isinstance(a, Terminate) for a in actions)
    world.run(6)
    assert world.terminated_before_drained == []
    assert 2 not in {r.id for r in world.live()} and len(world.serving()) == 2


def test_replicas_that_never_get_ready_fail_the_service_after_a_bounded_number() -> None:
    world = World(boot=1, boot_ready=False)
    world.run(30)
    assert world.status is _S.FAILED
    launches = sum(1 for a in world.log if isinstance(a, Launch))
    # the first two, replaced twice (each round is decided before its failures are counted):
    # then FAIL_AFTER failures in a row stop it
    assert launches == 6 and world.failures >= FAIL_AFTER
    assert world.tick() == []  # FAILED: nothing more is launched (until serve update)
    assert world.live() == []


def test_a_rolling_update_never_has_fewer_ready_replicas_and_drains_old_ones_last() -> None:
    world = _started()
    world.version = 2
    world.ready_seen.clear()
    world.run(12)
    assert world.status is _S.READY
    assert {r.version for r in world.live()} == {2} and len(world.serving()) == 2
    assert min(world.ready_seen) >= 2  # never fewer ready than before the update
    assert world.terminated_before_drained == []
    kinds = [(type(a).__name__, a.replica if isinstance(a, Retire | Terminate) else None)
             for a in world.log if isinstance(a, Launch | Retire | Terminate)]  # fmt: skip
    first_retire = next(i for i, k in enumerate(kinds) if k[0] == "Retire")
    assert [k[0] for k in kinds[first_retire - 2 : first_retire]] == ["Launch", "Launch"]
    assert any(isinstance(a, SetService) and a.status is _S.UPDATING for a in world.log)


def test_scale_down_drains_before_it_terminates_and_prefers_the_autoscaler_choice() -> None:
    world = World(settings=ServiceSettings(min_replicas=1, max_replicas=4), desired=3)
    world.run(6, ScaleInput(3, "steady"))
    assert len(world.serving()) == 3
    actions = world.tick(ScaleInput(1, "load below 0.3 for 300 s", remove=(2,)))
    assert RecordScale(1, "load below 0.3 for 300 s", None, True) in actions
    retired = [a.replica for a in actions if isinstance(a, Retire)]
    assert len(retired) == 2 and 2 in retired
    assert not any(isinstance(a, Terminate) for a in actions)
    world.run(4, ScaleInput(1, "steady"))
    assert world.terminated_before_drained == [] and len(world.live()) == 1


def test_a_drain_that_does_not_finish_is_cut_after_its_timeout() -> None:
    world = World(settings=ServiceSettings(min_replicas=1, max_replicas=4), drain_ticks=10_000)
    world.run(6, ScaleInput(2, "steady"))
    world.tick(ScaleInput(1, "quiet"))
    world.run(3, ScaleInput(1, "quiet"))
    retiring = [r for r in world.live() if r.retiring is not None]
    assert len(retiring) == 1 and retiring[0].drain_started_at is not None
    world.now = retiring[0].drain_started_at + DRAIN_TIMEOUT_S
    actions = world.tick(ScaleInput(1, "quiet"))
    assert any(isinstance(a, Terminate) and "timed out" in a.reason for a in actions)
    assert len(world.live()) == 1


def test_serve_down_drains_every_replica_then_goes_down_with_nothing_left() -> None:
    world = _started()
    world.status = _S.SHUTTING_DOWN
    actions = world.tick()
    assert sorted(a.replica for a in actions if isinstance(a, Retire)) == [1, 2]
    assert not any(isinstance(a, Terminate) for a in actions)
    world.run(6)
    assert world.status is _S.DOWN
    assert any(isinstance(a, CloseEndpoint) for a in world.log)
    assert world.live() == [] and world.backends == frozenset()
    assert world.terminated_before_drained == []


def test_scale_to_zero_is_ready_with_no_replica() -> None:
    world = World(settings=ServiceSettings(min_replicas=0, max_replicas=2), desired=0)
    world.run(3)
    assert world.status is _S.READY and world.replicas == {}
    world.run(5, ScaleInput(1, "a request is waiting"))
    assert len(world.serving()) == 1 and world.status is _S.READY


def test_the_spot_mix_keeps_the_on_demand_base() -> None:
    settings = ServiceSettings(min_replicas=1, max_replicas=8, on_demand_base=1, spot_share=0.75)
    assert settings.mix(1) == (1, 0)
    assert settings.mix(5) == (2, 3)
    assert settings.mix(5, spot_available=False) == (5, 0)
    assert settings.clamp(20) == 8 and settings.clamp(0) == 1
