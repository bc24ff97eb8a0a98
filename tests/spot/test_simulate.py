"""The spot simulator's exact rules on hand-computed windows, the baseline policies' decisions on
crafted observations (every safety-net branch, the hysteresis), and properties of the exact
optimum against the online policies on random small traces."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.errors import UserInputError
from gpulease.spot import (
    POLICIES,
    Greedy,
    Mode,
    Observation,
    OnDemand,
    Policy,
    Trace,
    UniformProgress,
    generate_trace,
    make_policy,
    optimal_cost,
    run_spot_sim,
    safety_net,
    simulate_window,
)
from gpulease.spot.simulate import Availability, WindowResult

SP, OD, ID = Mode.SPOT, Mode.ON_DEMAND, Mode.IDLE
OD_PRICE, SPOT_PRICE = 3.6, 1.2  # $ per hour: 0.6 and 0.2 per 600 s tick
OD_TICK, SPOT_TICK = 0.6, 0.2


class Script:
    """A policy that plays a fixed list of modes and records what it saw."""

    name = "script"

    def __init__(self, modes: list[Mode]) -> None:
        self.modes = modes
        self.seen: list[Observation] = []

    def reset(self) -> None:
        self.seen = []

    def decide(self, obs: Observation) -> Mode:
        self.seen.append(obs)
        return self.modes[obs.tick]


def run(
    policy: Policy,
    available: Availability,
    *,
    job: float,
    deadline: float,
    d: float,
    gap: float = 600.0,
) -> WindowResult:
    return simulate_window(
        policy,
        available,
        job_s=job,
        deadline_s=deadline,
        changeover_s=d,
        gap_s=gap,
        od_price=OD_PRICE,
        spot_price=SPOT_PRICE,
    )


# --- the rules, on hand-computed windows ---------------------------------------------------------


def test_starting_pays_the_changeover_once_and_the_finishing_tick_is_billed_in_full() -> None:
    policy = Script([SP, SP, SP, SP])
    result = run(policy, [True] * 4, job=1200, deadline=2400, d=100)
    # tick 0: 600 − 100 = 500; tick 1: 1100; tick 2: min(600, 100) → 1200, finished.
    assert [o.progress for o in policy.seen] == [0, 500, 1100]
    assert [o.prev_mode for o in policy.seen] == [ID, SP, SP]
    assert result.finished and not result.miss and result.ticks == 3
    assert result.cost == pytest.approx(3 * SPOT_TICK)
    assert (result.spot_s, result.on_demand_s) == (1800, 0)


def test_switching_mode_pays_a_new_changeover() -> None:
    policy = Script([SP, OD, OD, OD])
    result = run(policy, [True] * 4, job=1200, deadline=2400, d=100)
    assert [o.progress for o in policy.seen] == [0, 500, 1000]
    assert result.cost == pytest.approx(SPOT_TICK + 2 * OD_TICK)
    assert (result.spot_s, result.on_demand_s) == (600, 1200)


def test_a_new_changeover_replaces_the_pending_one() -> None:
    policy = Script([SP, OD, OD, OD, OD, OD])
    result = run(policy, [True] * 6, job=1200, deadline=3600, d=900)
    # tick 0: pending 900 → no progress, 300 left; tick 1: switch → 900 again (not 1200);
    # tick 2: 300 pending → 300 done; tick 3: 900; tick 4: 1200.
    assert [o.pending for o in policy.seen] == [0, 300, 300, 0, 0]
    assert [o.progress for o in policy.seen] == [0, 0, 0, 300, 900]
    assert result.finished and result.ticks == 5
    assert result.cost == pytest.approx(SPOT_TICK + 4 * OD_TICK)


def test_a_preemption_turns_spot_into_idle_and_the_restart_pays_again() -> None:
    policy = Script([SP, SP, SP, SP, SP])
    result = run(policy, [True, False, True, True, True], job=1200, deadline=3000, d=100)
    # tick 1: the spot run of tick 0 is preempted, so the policy sees IDLE.
    assert [o.prev_mode for o in policy.seen] == [ID, ID, ID, SP]
    assert [o.spot_available for o in policy.seen] == [True, False, True, True]
    # tick 1 is idle (spot chosen but unavailable): not billed, no progress.
    assert [o.progress for o in policy.seen] == [0, 500, 500, 1000]
    assert result.cost == pytest.approx(3 * SPOT_TICK)
    assert result.spot_s == 1800 and result.ticks == 4


def test_idle_costs_nothing_and_keeps_progress() -> None:
    policy = Script([OD, ID, OD, OD])
    result = run(policy, [False] * 4, job=1000, deadline=2400, d=100)
    # tick 2 restarts from idle: a fresh changeover (500 more) finishes the job.
    assert [o.progress for o in policy.seen] == [0, 500, 500]
    assert [o.prev_mode for o in policy.seen] == [ID, OD, ID]
    assert result.cost == pytest.approx(2 * OD_TICK) and result.ticks == 3


def test_a_miss_counts_at_its_cost_so_far_over_the_on_demand_baseline() -> None:
    result = run(OnDemand(), [False] * 2, job=1200, deadline=1200, d=100)
    assert result.miss and not result.finished and result.ticks == 2
    assert result.cost == pytest.approx(2 * OD_TICK)
    # baseline: ceil((1200 + 100) / 600) = 3 ticks on demand.
    assert result.cost_ratio == pytest.approx(2 / 3)


def test_the_deadline_is_floored_to_whole_ticks() -> None:
    # D = 1799 s holds only 2 whole ticks: not enough for 3 ticks of work.
    assert run(OnDemand(), [True] * 3, job=1200, deadline=1799, d=100).miss
    assert not run(OnDemand(), [True] * 3, job=1200, deadline=1800, d=100).miss


def test_all_on_demand_costs_exactly_the_baseline() -> None:
    result = run(OnDemand(), [True] * 10, job=1300, deadline=6000, d=200)
    assert result.cost_ratio == pytest.approx(1.0)
    assert result.ticks == 3  # ceil(1500 / 600)


def test_availability_may_be_a_numpy_array_and_must_cover_the_deadline() -> None:
    window = np.array([True, True, False, True])
    assert run(Greedy(), window, job=600, deadline=2400, d=0).cost == pytest.approx(SPOT_TICK)
    with pytest.raises(ValueError, match="deadline needs 4"):
        run(Greedy(), [True] * 3, job=600, deadline=2400, d=0)


# --- policy decisions on crafted observations ----------------------------------------------------


def obs(
    *,
    tick: int,
    prev: Mode = ID,
    up: bool = True,
    progress: float = 0.0,
    pending: float = 0.0,
    job: float = 3000.0,
    deadline: float = 6000.0,
    d: float = 300.0,
    gap: float = 600.0,
) -> Observation:
    return Observation(tick, prev, up, progress, tick * gap, pending, job, deadline, d, gap)


def test_safety_net_starts_on_demand_when_two_changeovers_just_fit() -> None:
    # rem + 2d = 3600 s = 6 ticks; R = (10 − t) ticks.
    assert safety_net(obs(tick=3), ID) is ID  # R = 7 ticks: still slack
    assert safety_net(obs(tick=4), ID) is OD  # R = 6 ticks: go
    assert safety_net(obs(tick=4, prev=OD), ID) is OD
    assert safety_net(obs(tick=4, up=False), SP) is OD


def test_safety_net_keeps_a_running_spot_until_one_changeover_just_fits() -> None:
    # prev spot skips the first branch; rem + d = 3300 s → 6 ticks ≥ R = 6 → stay on spot.
    assert safety_net(obs(tick=4, prev=SP), ID) is SP
    # ... unless spot is still paying its changeover: then on-demand.
    assert safety_net(obs(tick=4, prev=SP, pending=100), SP) is OD
    # with more slack the proposal stands.
    assert safety_net(obs(tick=3, prev=SP), ID) is ID


def test_safety_net_second_branch_for_idle_and_zero_changeover() -> None:
    # rem + d branch reached from idle only when the rem + 2d branch did not fire: impossible
    # for d ≥ 0 with prev idle; with prev spot and pending, d = 0 and spot up → spot.
    assert safety_net(obs(tick=5, prev=SP, pending=1, d=0.0), ID) is SP
    assert safety_net(obs(tick=5, prev=SP, pending=1, d=0.0, up=False), ID) is OD
    assert safety_net(obs(tick=5, d=0.0), ID) is OD  # first branch (rem + 0 ≥ R) from idle


def test_greedy_takes_spot_else_waits() -> None:
    greedy = Greedy()
    assert greedy.decide(obs(tick=0)) is SP
    assert greedy.decide(obs(tick=0, up=False)) is ID
    assert greedy.decide(obs(tick=4, up=False)) is OD  # the safety net


def test_uniform_progress_follows_the_line_with_hysteresis() -> None:
    up = UniformProgress()
    # C/D = 0.5: at t = 2 (1200 s elapsed) the line is at 600 s of progress.
    assert up.decide(obs(tick=2, progress=600, up=False)) is ID  # on the line: wait
    assert up.decide(obs(tick=2, progress=500, up=False)) is OD  # behind: on-demand
    assert up.decide(obs(tick=2, progress=500)) is SP  # behind, spot up: spot
    # hysteresis: on on-demand, stay until ahead of the line two changeovers later
    # ((1200 + 600) × 0.5 = 900).
    assert up.decide(obs(tick=2, prev=OD, progress=900)) is OD
    assert up.decide(obs(tick=2, prev=OD, progress=901)) is SP
    assert up.decide(obs(tick=2, prev=OD, progress=2000, up=False)) is OD
    assert up.decide(obs(tick=4, progress=2000, up=False)) is ID
    assert up.decide(obs(tick=5, progress=500, up=True)) is OD  # the safety net


def test_registry_names_and_errors() -> None:
    assert isinstance(make_policy("greedy"), Greedy)
    assert isinstance(make_policy("on_demand"), OnDemand)
    assert isinstance(make_policy("uniform_progress"), UniformProgress)
    with pytest.raises(UserInputError, match="--policy: unknown policy 'nope'"):
        make_policy("nope")
    with pytest.raises(UserInputError, match="not an online policy"):
        make_policy("optimal")


def test_gpulease_policy_is_registered_when_its_module_exists() -> None:
    pytest.importorskip(
        "gpulease.spot.gpulease_policy",
        reason="gpulease.spot.gpulease_policy (GpuleasePolicy) is not written yet",
    )
    policy = POLICIES["gpulease"]()
    assert policy.name == "gpulease"
    window = [i % 5 != 0 for i in range(100)]
    result = run(policy, window, job=30000, deadline=54000, d=300)
    assert result.finished


def test_on_demand_never_misses_when_the_deadline_allows_it() -> None:
    trace = generate_trace(400, seed=5, availability=0.3)
    window = [n >= 1 for n in trace.data]
    for d in (0, 60, 600, 1500):
        job = 48 * 600
        deadline = math.ceil((job + d) / 600) * 600
        assert run(OnDemand(), window, job=job, deadline=deadline, d=d).finished


# --- the exact optimum ---------------------------------------------------------------------------


def optimal(
    window: list[bool], *, job: float, deadline: float, d: float, gap: float = 600.0
) -> WindowResult:
    return optimal_cost(
        window,
        job_s=job,
        deadline_s=deadline,
        changeover_s=d,
        gap_s=gap,
        od_price=OD_PRICE,
        spot_price=SPOT_PRICE,
    )


def test_optimal_on_a_hand_computed_window() -> None:
    # Spot in ticks 0–1 and 4–5; a 1000 s job, d = 100, deadline 6 ticks.
    window = [True, True, False, False, True, True]
    # Spot 0–1 (500 + 600 ≥ 1000) finishes in 2 spot ticks: 0.4.
    assert optimal(window, job=1000, deadline=3600, d=100).cost == pytest.approx(2 * SPOT_TICK)
    # Deadline of 3 ticks and 1600 s: spot 0-1 gives 1100, the third tick needs on-demand
    # (d again: 500 more) → 2 spot + 1 od.
    result = optimal(window, job=1600, deadline=1800, d=100)
    assert result.cost == pytest.approx(2 * SPOT_TICK + OD_TICK)
    assert result.finished and result.spot_s == 1200 and result.on_demand_s == 600


def test_optimal_is_a_miss_when_even_on_demand_cannot_finish() -> None:
    result = optimal([True] * 3, job=1200, deadline=1200, d=100)
    assert result.miss and result.cost == pytest.approx(2 * OD_TICK)


def test_optimal_handles_changeovers_longer_than_a_tick() -> None:
    # d = 900 > gap: one start costs 1.5 ticks of no progress; switching is never worth it here.
    window = [True] * 4 + [False] * 6
    result = optimal(window, job=1200, deadline=6000, d=900)
    # Spot ticks 0-3: 0, 300, 900, 1200 → 4 spot ticks.
    assert result.cost == pytest.approx(4 * SPOT_TICK)


def test_optimal_is_fast_on_a_full_size_window() -> None:
    trace = generate_trace(600, seed=2)
    window = np.asarray(trace.data[:480]) >= 1
    start = time.perf_counter()
    result = optimal_cost(
        window,
        job_s=48 * 3600,
        deadline_s=80 * 3600,
        changeover_s=180,
        gap_s=600,
        od_price=3.06,
        spot_price=0.9731,
    )
    elapsed = time.perf_counter() - start
    assert result.finished
    assert elapsed < 0.5  # ~0.05 s on an idle core; generous for a loaded CI


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[bool], float, float, float, float]:
    gap = draw(st.sampled_from([300.0, 600.0]))
    d = draw(st.sampled_from([0.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1500.0]))
    job = draw(st.integers(1, 20)) * 60.0 * draw(st.sampled_from([1, 5, 10]))
    slack = draw(st.integers(0, 12)) * gap + draw(st.sampled_from([0.0, 30.0]))
    deadline = job + slack
    ticks = math.floor(deadline / gap + 1e-9)
    window = draw(st.lists(st.booleans(), min_size=ticks, max_size=ticks))
    return window, job, deadline, d, gap


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_optimal_bounds_every_online_policy(
    scenario: tuple[list[bool], float, float, float, float],
) -> None:
    window, job, deadline, d, gap = scenario
    best = optimal(window, job=job, deadline=deadline, d=d, gap=gap)
    policies: list[Policy] = [OnDemand(), Greedy(), UniformProgress()]
    results = {p.name: run(p, window, job=job, deadline=deadline, d=d, gap=gap) for p in policies}
    if results["on_demand"].finished:
        assert best.finished
    for name, result in results.items():
        if result.finished:
            assert best.cost <= result.cost + 1e-9, name
    two_changeovers = math.ceil((job + 2 * d) / gap - 1e-9) <= math.floor(deadline / gap + 1e-9)
    if two_changeovers:
        assert results["greedy"].finished
        assert results["uniform_progress"].finished


def test_gpulease_learns_from_the_trace_before_each_window_and_only_from_it() -> None:
    # Two traces that agree from tick 168 on and differ in the 28 hours before it (a long run, or
    # runs of one tick): with the week as history the gpulease policy decides differently on the
    # same window; without history (--history-hours 0) exactly alike; UP never looks.
    window = ([True] * 2 + [False] * 2) * 10 + [True] * 40
    rich = Trace(600.0, tuple([1] * 150 + [0] * 18 + [int(a) for a in window]), name="rich")
    poor = Trace(600.0, tuple([int(t % 4 == 0) for t in range(168)] + [int(a) for a in window]))
    kwargs = {
        "job_hours": 6.0,
        "deadline_hours": [10.0],
        "changeover_hours": [0.2],
        "start_ticks": [168],
        "policies": ["uniform_progress", "gpulease"],
    }

    def costs(history_hours: float) -> list[list[float]]:
        out = []
        for trace in (rich, poor):
            cells = run_spot_sim([trace], **kwargs, history_hours=history_hours)  # type: ignore[arg-type]
            out.append([cell.mean_cost_ratio for cell in cells])
        return out

    with_history, without = costs(28.0), costs(0.0)
    assert with_history[0][0] == with_history[1][0]  # uniform_progress
    assert with_history[0][1] != with_history[1][1]
    assert without[0] == without[1]
