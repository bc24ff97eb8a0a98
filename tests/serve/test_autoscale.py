"""The autoscaler in virtual time: a :class:`Fleet` (tests/serve/fleet.py) applies each decision
the way the services controller does, on a VirtualClock, with a load each test offers.

Covers sustained load up and down, flapping (dstack#2656: at most one action per cooldown, and a
removal that would send the load back above ``up`` is not made), min/max, the spot mix with a
spot loss and its return, scale to zero and back, booting replicas not double-counted, the
memory's JSON form; Hypothesis: the decision stays within [min, max] and removes only replicas
that exist.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.errors import UserInputError
from gpulease.serve.autoscale import (
    AutoscalePolicy,
    LoadSample,
    PolicyError,
    ReplicaView,
    ScaleMemory,
    decide,
    ratio,
)
from gpulease.serve.replica_mix import mix, plan

from .fleet import Fleet

POLICY = AutoscalePolicy(min_replicas=1, max_replicas=8)  # the spec's defaults, 1..8


def test_sustained_load_adds_after_up_for() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=1)
    decisions = fleet.run(60, in_flight=8)  # ratio 1.0 > 0.8, samples at 10..60: 50 s of it
    assert [d.target for d in decisions] == [1] * 6
    d = fleet.tick(8)  # t=70: 60 s above since the first sample
    assert (d.target, d.add_on_demand, d.add_spot, d.remove) == (3, 2, 0, ())
    assert "scale up" in d.reason and "1 → 3" in d.reason
    assert d.memory.last_action_at == 70.0 and d.memory.above_since is None


def test_load_just_below_up_never_adds() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=1)
    fleet.run(3600, in_flight=6)  # 0.75 < 0.8
    assert fleet.actions() == []


def test_one_low_sample_restarts_the_up_streak() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=1)
    fleet.run(50, in_flight=8)
    fleet.tick(1)  # t=60: below
    fleet.run(60, in_flight=8)  # t=70..120: the streak is 50 s long at 120
    assert fleet.actions() == []
    assert fleet.tick(8).target == 3  # t=130


def test_sustained_low_load_removes_one_at_a_time_down_to_min() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=4)
    fleet.run(3600, in_flight=4)
    # each removal needs its own 300 s below, counted from the sample after the last action
    assert fleet.actions() == [(310.0, 4, 3), (620.0, 3, 2), (930.0, 2, 1)]
    assert fleet.ids() == [1]  # the newest went first


def test_short_oscillations_never_act() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=2)
    for i in range(360):  # an hour of 30 s overloads and 30 s lulls
        fleet.tick(20 if (i // 3) % 2 == 0 else 1)
    assert fleet.actions() == []


def test_a_removal_that_would_bring_the_load_back_above_up_is_not_made() -> None:
    """dstack#2656: 1 replica at 0.875 → +2 → 0.29 < 0.3 → −2 would be 0.875 again, for ever.
    The down step is cut to what keeps the load below ``up``: 3 → 2 (0.44), and it rests there."""
    policy = AutoscalePolicy(min_replicas=1, max_replicas=8, down_remove=2)
    fleet = Fleet(policy)
    fleet.seed(on_demand=1)
    fleet.run(4 * 3600, in_flight=7)
    assert [(before, after) for _, before, after in fleet.actions()] == [(1, 3), (3, 2)]


def test_slow_oscillations_act_at_most_once_per_cooldown() -> None:
    policy = AutoscalePolicy(min_replicas=1, max_replicas=8, cooldown_s=120.0, down_for_s=120.0)
    fleet = Fleet(policy)
    fleet.seed(on_demand=1)
    for i in range(1080):  # three hours; 400 s of 30 in flight, 400 s of 2
        fleet.tick(30 if (i // 40) % 2 == 0 else 2)
    times = [at for at, _, _ in fleet.actions()]
    assert len(times) >= 6  # it does follow the load
    assert min(b - a for a, b in itertools.pairwise(times)) >= policy.cooldown_s


def test_min_and_max_hold_under_any_load() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=1)
    for _ in range(720):
        fleet.tick(10_000)
        assert fleet.count() <= POLICY.max_replicas
    assert fleet.memory.target == 8 and fleet.count("ready") == 8
    assert "steady at 8" in fleet.decisions[-1][2].reason

    idle = AutoscalePolicy(min_replicas=2, max_replicas=8)
    fleet = Fleet(idle)
    fleet.seed(on_demand=5)
    for _ in range(720):
        fleet.tick(0)
        assert fleet.memory.target is not None and fleet.memory.target >= 2
    assert fleet.count("ready") == 2


def test_a_fresh_memory_starts_at_min_and_a_narrower_range_clamps() -> None:
    d = decide(100.0, [], [], AutoscalePolicy(min_replicas=2, max_replicas=4), ScaleMemory())
    assert (d.target, d.add_on_demand) == (2, 2)
    views = [ReplicaView(i, "ready", False, float(i)) for i in range(1, 7)]
    narrower = AutoscalePolicy(min_replicas=1, max_replicas=4)
    d = decide(100.0, [], views, narrower, ScaleMemory(target=6))
    assert d.target == 4 and d.remove == (6, 5)


SPOT = AutoscalePolicy(min_replicas=3, max_replicas=6, on_demand_base=1, spot_share=1.0)


def test_the_mix_keeps_the_base_on_demand_and_the_share_on_spot() -> None:
    assert mix(0, 1, 0.75) == (0, 0)
    assert mix(1, 1, 0.75) == (0, 1)
    assert mix(3, 1, 0.75) == (2, 1)  # 1.5 of the 2 above the base: a half goes to spot
    assert mix(5, 1, 0.75) == (3, 2)  # 3.0
    assert mix(6, 1, 0.5) == (3, 3)  # 2.5 → 3
    assert mix(6, 0, 0.1) == (1, 5)  # 0.6 → 1
    assert mix(4, 2, 1.0) == (2, 2) and mix(4, 0, 0.0) == (0, 4)
    fleet = Fleet(SPOT)
    fleet.run(40, in_flight=0)
    assert (fleet.count(spot=False), fleet.count(spot=True)) == (1, 2)


def test_a_preempted_spot_replica_is_replaced_on_demand_then_back_on_spot() -> None:
    fleet = Fleet(SPOT)
    fleet.seed(on_demand=1, spot=2)  # ids 1 (on-demand), 2 and 3 (spot)
    fleet.run(60, in_flight=12)  # 0.5: steady
    fleet.preempt(3)
    d = fleet.tick(12)
    assert (d.add_on_demand, d.add_spot, d.remove) == (1, 0, ())
    assert d.target == 3 and "spot unavailable until 360" in d.reason  # preempted at 60
    assert d.memory.spot_unavailable_until == 360.0
    swap_at = None
    while fleet.now < 1200:
        d = fleet.tick(12)
        assert fleet.count("ready") >= 3 or fleet.now < 100  # the fallback is ready at 100
        if d.add_spot:
            swap_at = fleet.now
            assert d.remove == ()  # the spot one first: the on-demand stays until it is ready
        if d.remove:
            assert swap_at is not None and fleet.count("ready", spot=True) == 2
            assert d.remove == (4,)  # the fallback, not the base on-demand replica (1)
    assert swap_at == 360.0
    assert sorted(fleet.ids()) == [1, 2, 5] and fleet.count(spot=True) == 2
    assert fleet.actions() == []  # a replacement is not a scaling action


def test_spot_unavailable_scales_up_on_demand_and_swaps_back_when_it_returns() -> None:
    fleet = Fleet(SPOT)
    fleet.seed(on_demand=1, spot=2)
    fleet.spot_available = False
    fleet.run(200, in_flight=28)  # 28 / 8 / 3 = 1.2: up by 2, both on-demand; then 0.7
    assert fleet.memory.target == 5
    assert (fleet.count(spot=False), fleet.count(spot=True)) == (3, 2)
    fleet.spot_available = True
    held = fleet.now + SPOT.spot_retry_s  # the last tick without spot holds it this long
    while fleet.now < held - 10:
        assert fleet.tick(20).add_spot == 0  # 20 / 8 / 5 = 0.5: steady
    fleet.run(600, in_flight=20)
    assert (fleet.count(spot=False), fleet.count(spot=True)) == (1, 4)


def test_no_traffic_scales_to_zero_and_a_waiting_request_wakes_one_at_once() -> None:
    policy = AutoscalePolicy(min_replicas=0, max_replicas=4)
    fleet = Fleet(policy)
    fleet.seed(on_demand=1)
    fleet.run(310, in_flight=0)  # idle from the sample at 10: 300 s of it at 310
    assert fleet.actions() == [(310.0, 1, 0)] and fleet.count() == 0
    fleet.run(20, in_flight=0)
    d = fleet.tick(1)  # a request queued in the proxy, 30 s after the last action
    assert (d.target, d.add_on_demand) == (1, 1) and "0 → 1" in d.reason
    fleet.run(40, in_flight=1)
    assert fleet.count("ready") == 1


def test_low_traffic_keeps_one_replica_when_min_is_zero() -> None:
    fleet = Fleet(AutoscalePolicy(min_replicas=0, max_replicas=4))
    fleet.seed(on_demand=2)
    fleet.run(3600, in_flight=1)
    assert fleet.memory.target == 1 and fleet.count("ready") == 1


def test_replicas_booting_are_not_added_twice() -> None:
    fleet = Fleet(POLICY, provision_s=300.0, start_s=300.0)
    fleet.seed(on_demand=1)
    fleet.run(660, in_flight=100)  # overloaded all along; the first add boots for 600 s
    assert [(b, a) for _, b, a in fleet.actions()] == [(1, 3)]
    assert "waiting for the replicas to be ready" in fleet.decisions[-1][2].reason
    fleet.run(120, in_flight=100)
    assert [(b, a) for _, b, a in fleet.actions()] == [(1, 3), (3, 5)]


def test_a_failed_replica_is_replaced_once_and_at_once() -> None:
    fleet = Fleet(POLICY)
    fleet.seed(on_demand=2)
    fleet.run(20, in_flight=8)  # 0.5: steady
    fleet.fail(2)
    d = fleet.tick(8)
    assert (d.add_on_demand, d.target) == (1, 2) and "failed or preempted" in d.reason
    assert fleet.tick(8).add_on_demand == 0
    # a controller that has not retired the failed replica yet does not get a second one either
    views = [
        ReplicaView(1, "ready", False, 0.0),
        ReplicaView(2, "failed", False, 30.0),
        ReplicaView(3, "provisioning", False, 30.0),
    ]
    again = decide(40.0, [], views, POLICY, d.memory)
    assert (again.add_on_demand, again.add_spot, again.remove) == (0, 0, ())


def test_removal_prefers_on_demand_above_the_mix_and_ready_over_starting() -> None:
    def view(rid: int, state: str, spot: bool = False) -> ReplicaView:
        return ReplicaView(rid, state, spot, float(rid))  # type: ignore[arg-type]

    ready4 = [view(i, "ready") for i in range(1, 5)]
    assert plan(3, [*ready4, view(5, "starting")], 1, 0.0, spot_usable=True).remove == (4, 5)
    assert plan(4, [*ready4, view(5, "starting")], 1, 0.0, spot_usable=True).remove == (5,)
    assert plan(2, [*ready4, view(5, "provisioning")], 1, 0.0, spot_usable=True).remove == (
        4,
        3,
        5,
    )
    mixed = [view(1, "ready"), view(2, "ready"), view(3, "ready", True), view(4, "ready", True)]
    assert plan(3, mixed, 1, 1.0, spot_usable=True).remove == (2,)
    two = [view(1, "ready"), view(2, "ready")]
    assert plan(1, two, 1, 0.0, spot_usable=True).remove == (2,)
    assert plan(2, two, 1, 1.0, spot_usable=False).add_spot == 0


def test_other_metrics() -> None:
    latency = AutoscalePolicy(max_replicas=4, metric="latency_p95", target_per_replica=0.25)
    busy = LoadSample(at=1.0, in_flight=3, qps=10, latency_p95_s=0.5)
    assert ratio(busy, latency, ready=1) == 2.0
    assert ratio(LoadSample(1.0, 3, 10), latency, ready=1) is None  # no figure: no evidence
    assert ratio(LoadSample(1.0, 0, 0), latency, ready=1) == 0.0  # idle
    gpu = AutoscalePolicy(max_replicas=4, metric="gpu_utilisation", target_per_replica=100)
    assert ratio(LoadSample(1.0, 3, 10, gpu_utilisation=95.0), gpu, ready=2) == 0.95
    qps = AutoscalePolicy(max_replicas=4, metric="qps", target_per_replica=5)
    assert ratio(busy, qps, ready=2) == 1.0
    assert ratio(busy, qps, ready=0) == math.inf
    fleet = Fleet(latency)
    fleet.seed(on_demand=1)
    for _ in range(7):
        d = fleet.tick(3, latency_p95_s=0.5)
        fleet.tick(3)  # a sample without latency between: neither breaks nor extends
    assert d.target == 3


def test_memory_round_trips_through_json_and_rejects_bad_values() -> None:
    memory = ScaleMemory(10.0, 20.0, None, 400.0, 5.0, 3)
    assert ScaleMemory.from_dict(json.loads(json.dumps(memory.as_dict()))) == memory
    assert ScaleMemory.from_dict({"target": 2.0, "future": 1}) == ScaleMemory(target=2)
    with pytest.raises(ValueError, match="last_action_at"):
        ScaleMemory.from_dict({"last_action_at": "soon"})
    with pytest.raises(ValueError, match="target"):
        ScaleMemory.from_dict({"target": 1.5})


def test_a_policy_the_rules_cannot_run_is_refused() -> None:
    with pytest.raises(PolicyError, match="down_below"):
        AutoscalePolicy(up_above=0.5, down_below=0.5)
    with pytest.raises(PolicyError, match="max_replicas"):
        AutoscalePolicy(min_replicas=0, max_replicas=0)
    with pytest.raises(PolicyError, match="spot_share"):
        AutoscalePolicy(spot_share=1.5)


# Stand-ins with the field names of spec.ServiceSpec (the contract, section 1), until the model
# is on main; AutoscalePolicy.from_spec reads only these names.
@dataclass(frozen=True)
class _Range:
    min: int = 1
    max: int | None = None


@dataclass(frozen=True)
class _Rule:
    threshold: float
    step: int
    for_s: float


@dataclass(frozen=True)
class _Scale:
    metric: str = "load"
    target_per_replica: float = 8.0
    up: _Rule = _Rule(0.8, 2, 60.0)
    down: _Rule = _Rule(0.3, 1, 300.0)
    cooldown_s: float = 60.0


@dataclass(frozen=True)
class _Spot:
    on_demand_base: int = 1
    spot_share: float = 0.0


@dataclass(frozen=True)
class _Service:
    replicas: _Range = _Range()
    autoscale: _Scale | None = None
    spot: _Spot = _Spot()


def test_from_spec_maps_the_service_section() -> None:
    service = _Service(_Range(1, 8), _Scale(metric="qps", up=_Rule(0.9, 3, 30)), _Spot(1, 0.75))
    policy = AutoscalePolicy.from_spec(service)
    assert (policy.min_replicas, policy.max_replicas, policy.metric) == (1, 8, "qps")
    assert (policy.up_above, policy.up_add, policy.up_for_s) == (0.9, 3, 30)
    assert (policy.down_below, policy.down_remove, policy.down_for_s) == (0.3, 1, 300)
    assert (policy.on_demand_base, policy.spot_share) == (1, 0.75)
    fixed = AutoscalePolicy.from_spec(_Service(_Range(2, 8)))
    assert (fixed.min_replicas, fixed.max_replicas) == (2, 2)  # no autoscale: fixed at min
    zero = AutoscalePolicy.from_spec(_Service(_Range(0), _Scale()))
    assert (zero.min_replicas, zero.max_replicas) == (0, 1)
    with pytest.raises(UserInputError, match=r"service\.autoscale\.down\.below"):
        AutoscalePolicy.from_spec(_Service(_Range(1, 4), _Scale(down=_Rule(0.9, 1, 300))))


SERVICE_YAML = """\
name: digits
run: python app.py
service:
  port: 8080
  replicas: {min: 1, max: 8}
  autoscale:
    metric: qps
    target_per_replica: 20
    up:   {above: 0.8, add: 2, for: 60s}
    down: {below: 0.3, remove: 1, for: 5m}
  spot: {on_demand_base: 1, spot_share: 0.75}
"""


def test_from_spec_reads_a_service_file(tmp_path: Path) -> None:
    """The real ``spec.ServiceSpec`` (issue 17's spec helper); skipped until it is on main."""
    pytest.importorskip("gpulease.spec.service")
    from gpulease.spec import load_task

    path = tmp_path / "service.yaml"
    path.write_text(SERVICE_YAML)
    service = getattr(load_task(path), "service", None)
    assert service is not None
    policy = AutoscalePolicy.from_spec(service)
    assert (policy.min_replicas, policy.max_replicas, policy.metric) == (1, 8, "qps")
    assert (policy.target_per_replica, policy.down_for_s, policy.spot_share) == (20, 300, 0.75)


# --- properties -------------------------------------------------------------------------------

STATES = ("provisioning", "starting", "ready", "draining", "failed", "preempted")


@st.composite
def situations(draw: st.DrawFn) -> tuple[AutoscalePolicy, list[ReplicaView], ScaleMemory]:
    low = draw(st.integers(0, 3))
    policy = AutoscalePolicy(
        min_replicas=low,
        max_replicas=draw(st.integers(max(low, 1), low + 6)),
        up_add=draw(st.integers(1, 3)),
        down_remove=draw(st.integers(1, 3)),
        up_for_s=draw(st.sampled_from([0.0, 20.0, 60.0])),
        down_for_s=draw(st.sampled_from([0.0, 30.0, 300.0])),
        cooldown_s=draw(st.sampled_from([0.0, 60.0])),
        on_demand_base=draw(st.integers(0, 2)),
        spot_share=draw(st.sampled_from([0.0, 0.5, 0.75, 1.0])),
    )
    n = draw(st.integers(0, 12))
    ids = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n, unique=True))
    replicas = [
        ReplicaView(i, draw(st.sampled_from(STATES)), draw(st.booleans()), draw(st.floats(0, 900)))
        for i in ids
    ]
    stamp = st.none() | st.floats(0, 1000)
    memory = ScaleMemory(
        last_action_at=draw(stamp),
        above_since=draw(stamp),
        below_since=draw(stamp),
        spot_unavailable_until=draw(stamp),
        idle_since=draw(stamp),
        target=draw(st.none() | st.integers(0, 15)),
    )
    return policy, replicas, memory


sample_streams = st.lists(
    st.builds(
        LoadSample,
        at=st.floats(0, 1000),
        in_flight=st.sampled_from([0.0, 0.5, 3.0, 40.0, 500.0]),
        qps=st.floats(0, 100),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(situations(), sample_streams, st.booleans())
def test_a_decision_stays_within_min_max_and_removes_only_live_replicas(
    situation: tuple[AutoscalePolicy, list[ReplicaView], ScaleMemory],
    samples: list[LoadSample],
    spot_available: bool,
) -> None:
    policy, replicas, memory = situation
    d = decide(1000.0, samples, replicas, policy, memory, spot_available=spot_available)
    live = {r.id: r for r in replicas if r.state in ("provisioning", "starting", "ready")}
    assert policy.min_replicas <= d.target <= policy.max_replicas
    assert len(set(d.remove)) == len(d.remove) and set(d.remove) <= set(live)
    assert spot_available or d.add_spot == 0
    ready = sum(1 for r in live.values() if r.state == "ready")
    ready_after = ready - sum(1 for i in d.remove if live[i].state == "ready")
    assert ready_after <= d.target  # never more serving than the target (≤ max)
    assert ready_after >= min(d.target, ready)  # and no dip below it by a removal
    assert len(live) - len(d.remove) + d.add_spot + d.add_on_demand >= d.target
    assert ScaleMemory.from_dict(d.memory.as_dict()) == d.memory


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0, 2, 8, 20, 60]), min_size=10, max_size=40), st.integers(1, 4))
def test_a_random_load_never_gets_two_actions_within_a_cooldown(
    levels: list[int], hold: int
) -> None:
    policy = AutoscalePolicy(min_replicas=1, max_replicas=6, up_for_s=20, down_for_s=40)
    fleet = Fleet(policy)
    fleet.seed(on_demand=1)
    for level in levels:
        for _ in range(hold):
            fleet.tick(level)
            assert 1 <= (fleet.memory.target or 0) <= 6
    times = [at for at, _, _ in fleet.actions()]
    assert all(b - a >= policy.cooldown_s for a, b in itertools.pairwise(times))
