"""The gpulease spot policy: never misses, never dearer than on-demand, beats uniform progress."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.spot.gpulease_policy import GpuleasePolicy, is_safe
from gpulease.spot.policies import OnDemand, UniformProgress
from gpulease.spot.sim import Mode, Observation, Policy
from gpulease.spot.simulate import WindowResult, simulate_window
from gpulease.spot.traces import generate_trace

GAP = 600.0
OD_PRICE = 3.06
SPOT_PRICE = 0.9731
HOUR = 3600.0


def _run(
    policy: Policy, available: list[bool], job: float, deadline: float, changeover: float
) -> WindowResult:
    policy.reset()
    return simulate_window(
        policy,
        available,
        job_s=job,
        deadline_s=deadline,
        changeover_s=changeover,
        gap_s=GAP,
        od_price=OD_PRICE,
        spot_price=SPOT_PRICE,
    )


def _obs(
    *,
    progress_h: float,
    elapsed_h: float,
    spot: bool,
    prev: Mode = Mode.IDLE,
    job_h: float = 10.0,
    deadline_h: float = 20.0,
    changeover: float = 180.0,
) -> Observation:
    return Observation(
        tick=round(elapsed_h * HOUR / GAP),
        prev_mode=prev,
        spot_available=spot,
        progress=progress_h * HOUR,
        elapsed=elapsed_h * HOUR,
        pending=0.0,
        job=job_h * HOUR,
        deadline=deadline_h * HOUR,
        changeover=changeover,
        gap=GAP,
    )


def _window(seed: int, ticks: int, availability: float, outage: float) -> list[bool]:
    trace = generate_trace(
        ticks, availability=availability, mean_outage_ticks=outage, seed=seed, gap_seconds=GAP
    )
    return [n >= 1 for n in trace.data]


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    availability=st.floats(0.05, 0.95),
    outage=st.floats(1.0, 60.0),
    job_ticks=st.integers(1, 60),
    slack_ticks=st.integers(0, 60),
    changeover=st.sampled_from([0.0, 60.0, 180.0, 600.0, 720.0, 1500.0]),
)
def test_never_misses_when_the_deadline_is_feasible(  # noqa: PLR0917 (hypothesis arguments)
    seed: int,
    availability: float,
    outage: float,
    job_ticks: int,
    slack_ticks: int,
    changeover: float,
) -> None:
    job = job_ticks * GAP - 37.0 * (seed % 2)  # also jobs that are not whole ticks
    need = -(-(job + changeover) // GAP)  # ceil: ticks on on-demand alone
    deadline = (need + slack_ticks) * GAP
    available = _window(seed, int(need + slack_ticks), availability, outage)
    result = _run(GpuleasePolicy(), available, job, deadline, changeover)
    assert result.finished


def test_never_misses_with_spot_flapping_every_tick() -> None:
    available = [t % 2 == 0 for t in range(400)]
    for changeover in (0.0, 180.0, 720.0):
        for slack in range(0, 40, 3):
            job = 200 * GAP
            deadline = (200 + 2 + slack) * GAP
            assert _run(GpuleasePolicy(), available, job, deadline, changeover).finished


def test_not_dearer_than_on_demand_on_average() -> None:
    rng = random.Random(7)
    ours, od = [], []
    for seed in range(40):
        available = _window(seed, 200, rng.uniform(0.1, 0.9), rng.uniform(1, 30))
        args = (available, 100 * GAP, 180 * GAP, 180.0)
        ours.append(_run(GpuleasePolicy(), *args).cost_ratio)
        od.append(_run(OnDemand(), *args).cost_ratio)
    assert sum(ours) <= sum(od)


def test_beats_uniform_progress_on_bursty_traces() -> None:
    ours, up = 0.0, 0.0
    for seed in range(30):
        available = _window(seed, 300, 0.5, 8.0)
        for deadline_ticks in (180, 240):
            args = (available, 150 * GAP, deadline_ticks * GAP, 720.0)
            ours += _run(GpuleasePolicy(), *args).cost_ratio
            up += _run(UniformProgress(), *args).cost_ratio
    assert ours < up


def test_behind_schedule_without_spot_runs_on_demand() -> None:
    obs = _obs(progress_h=2.0, elapsed_h=8.0, spot=False)
    assert GpuleasePolicy().decide(obs) == Mode.ON_DEMAND


def test_far_ahead_without_spot_idles() -> None:
    obs = _obs(progress_h=8.0, elapsed_h=4.0, spot=False)
    assert GpuleasePolicy().decide(obs) == Mode.IDLE


def test_spot_available_is_used() -> None:
    obs = _obs(progress_h=8.0, elapsed_h=4.0, spot=True)
    assert GpuleasePolicy().decide(obs) == Mode.SPOT


def test_tight_deadline_stays_on_demand_until_done() -> None:
    # Exactly enough for on-demand plus one 720 s changeover: a spot start (and its possible
    # preemption) cannot be afforded even though spot is always there.
    job, deadline = 30 * GAP, 32 * GAP
    policy = GpuleasePolicy()
    result = _run(policy, [True] * 32, job, deadline, 720.0)
    assert result.finished
    assert result.spot_s == 0.0


def test_safety_net_is_exact_at_the_boundary() -> None:
    # 10 ticks left, 8 ticks of work, d = 180 s: idling now leaves 9 ticks for 8 + d → safe;
    # with 9 ticks of work it is not.
    base = dict(elapsed_h=10 * GAP / HOUR, spot=False, job_h=20 * GAP / HOUR)
    deadline_h = 20 * GAP / HOUR
    ok = _obs(progress_h=12 * GAP / HOUR, deadline_h=deadline_h, **base)  # type: ignore[arg-type]
    tight = _obs(progress_h=11 * GAP / HOUR, deadline_h=deadline_h, **base)  # type: ignore[arg-type]
    assert is_safe(ok, Mode.IDLE)
    assert not is_safe(tight, Mode.IDLE)
    assert GpuleasePolicy().decide(tight) == Mode.ON_DEMAND
