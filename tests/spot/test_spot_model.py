"""The gpulease policy's availability model (heavy-tailed spells, in seconds) and its expected-cost
decision table on a planning grid that does not depend on the trace's tick."""

from __future__ import annotations

import math

import pytest

from gpulease.spot import spot_model
from gpulease.spot.runs import AGE_EDGES_S, BUCKETS, PRIOR_RATE_PER_H, RunStats, bucket_of
from gpulease.spot.spot_model import (
    IDLE,
    OD,
    SPOT,
    decision_table,
    plan_grid,
    round_rate,
    table_for,
)

from .heavy import heavy_trace

HOUR = 3600.0
RATIO = 0.9731 / 3.06


def test_the_plan_grid_is_the_same_on_600_300_and_200_s_ticks() -> None:
    grids = [plan_grid(48 * HOUR, 180.0, gap) for gap in (600.0, 300.0, 200.0)]
    assert {g.step_s for g in grids} == {600.0}
    assert [g.ticks_per_step for g in grids] == [1, 2, 3]
    assert len({(g.units, g.pendings, g.age_edges_s) for g in grids}) == 1
    # A changeover spans at most two steps; short jobs plan on the tick itself.
    assert plan_grid(8 * HOUR, 720.0, 34.0).step_s >= 360.0
    assert plan_grid(2 * HOUR, 0.0, 600.0).step_s == 600.0


def test_age_buckets_cover_every_age() -> None:
    assert bucket_of(0.0) == 0
    assert bucket_of(599.0) == 0 and bucket_of(600.0) == 1
    assert bucket_of(1e9) == BUCKETS - 1
    assert AGE_EDGES_S[0] == 0.0 and list(AGE_EDGES_S) == sorted(AGE_EDGES_S)


def test_a_fresh_model_is_its_prior() -> None:
    rates = RunStats().rates()
    for a in (0, 1):
        for b in range(BUCKETS):
            assert rates[a][b] * HOUR == pytest.approx(PRIOR_RATE_PER_H[a][b], rel=0.05)


def _spells(runs_s: list[float], outage_s: float, gap: float) -> list[bool]:
    ticks: list[bool] = []
    for run in runs_s:
        ticks += [True] * round(run / gap) + [False] * round(outage_s / gap)
    return ticks


def test_long_runs_teach_a_falling_hazard() -> None:
    # Runs of 10 min and of 8 h, many of each: a run that has lasted past an hour is seen to end
    # far less often than a young one, which is what a two-state chain cannot say.
    stats = RunStats.from_availability(_spells([600.0, 8 * HOUR] * 30, 1200.0, 600.0), 600.0)
    run = stats.rates()[1]
    assert run[0] > 5 * run[bucket_of(2 * HOUR)]


def test_the_rates_do_not_depend_on_the_tick() -> None:
    # A week of a heavy-tailed market seen at 600 s and at 200 s ticks: about the same rates past
    # the first 10 minutes. In the first bucket the two views differ by nature (at 600 s a spell
    # of one tick ended somewhere in it, at 200 s it is seen to end exactly at its edge), within 2×.
    trace = heavy_trace(168.0, gap_s=600.0, seed=3)
    ticks = [n >= 1 for n in trace.data]
    coarse = RunStats.from_availability(ticks, 600.0).rates()
    fine = RunStats.from_availability([t for t in ticks for _ in range(3)], 200.0).rates()
    for a in (0, 1):
        assert coarse[a][0] / 2 <= fine[a][0] <= coarse[a][0] * 2
        for b in range(1, BUCKETS):
            assert fine[a][b] == pytest.approx(coarse[a][b], rel=0.25)


def test_statistics_round_trip_and_carry_over() -> None:
    stats = RunStats.from_availability([True] * 30 + [False] * 5 + [True] * 2, 600.0)
    again = RunStats.from_dict(stats.to_dict())
    assert again == stats
    assert again.age_now(True) == 1200.0 and again.age_now(False) == 0.0
    copy = stats.copy()
    copy.advance(False, 600.0)
    assert stats.state is True and copy.state is False  # a copy is independent


def test_rates_round_to_a_geometric_grid() -> None:
    assert round_rate(1.0) == 1.0
    assert round_rate(1.1) == 1.0 and round_rate(1.2) == pytest.approx(1.25)
    assert round_rate(0.0) > 0.0  # never a rate of zero: every path stays possible


def _table(
    job: float, changeover: float, horizon: int, run_rate_h: float = 0.2
) -> spot_model.Table:
    grid = plan_grid(job, changeover, 600.0)
    buckets = len(grid.age_edges_s)
    rates = (tuple([1.0 / HOUR] * buckets), tuple([run_rate_h / HOUR] * buckets))
    return decision_table(grid, horizon, rates, RATIO)


def test_table_decisions_on_hand_checked_states() -> None:
    # 10 steps of work, d = 0: with exactly 10 steps left and no spot only on-demand can finish
    # (idling leaves 10 steps of work in 9); with spot, a spot step loses nothing even if spot
    # goes (d = 0); far ahead, spot is taken and an outage is idled through.
    table = _table(6000.0, 0.0, 128)

    def decide(left: int, spot: bool) -> int:
        return table.decide(
            time_left=left * 600.0, spot=spot, age_s=0.0, prev_mode=0, pending=0.0, progress=0.0
        )

    assert decide(10, False) == OD
    assert decide(10, True) == SPOT
    assert decide(100, True) == SPOT
    assert decide(100, False) == IDLE
    assert decide(9, False) == OD  # cannot finish: on-demand, the fastest plan
    assert decide(0, False) == OD


def test_a_solved_table_serves_any_shorter_time_left() -> None:
    # Indexed by steps left: a table solved over 128 steps decides exactly as one over 64 does
    # wherever both reach, so one solve serves every later refit with the same rates.
    long, short = _table(20 * 600.0, 180.0, 128), _table(20 * 600.0, 180.0, 64)
    assert (long.codes[:64] == short.codes).all()
    spot_model._TABLES.clear()
    kwargs = {"job": 20 * 600.0, "changeover": 180.0, "gap": 600.0, "spot_ratio": RATIO}
    rates = RunStats().rates()
    first = table_for(time_left=100 * 600.0, rates=rates, **kwargs)
    assert table_for(time_left=40 * 600.0, rates=rates, **kwargs) is first
    assert first.codes.shape[0] >= 100
    assert math.isfinite(first.grid.step_s)
