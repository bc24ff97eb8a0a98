"""The learned availability model and the expected-cost decision table of the gpulease policy."""

from __future__ import annotations

import math

import numpy as np

from gpulease.spot.gpulease_policy import GpuleasePolicy
from gpulease.spot.policies import UniformProgress
from gpulease.spot.simulate import simulate_window
from gpulease.spot.spot_model import (
    IDLE,
    LEVELS,
    OD,
    SPOT,
    MarkovEstimate,
    decision_table,
    level,
    progress_unit,
    table_for,
)
from gpulease.spot.traces import generate_trace

GAP = 600.0
RATIO = 0.9731 / 3.06


def test_level_rounds_in_log_space() -> None:
    assert level(0.5) in LEVELS
    assert level(0.011) == 0.01
    assert level(0.9) == 0.8
    assert level(0.0) == 0.01  # never a probability of zero: every path stays possible


def test_estimate_starts_at_the_prior_and_follows_the_counts() -> None:
    estimate = MarkovEstimate()
    assert estimate.chain() == (level(0.25), level(0.25))
    for _ in range(200):  # long runs up, short outages
        for before, now in [(True, True)] * 19 + [(True, False), (False, True)]:
            estimate.observe(before, now)
    q, r = estimate.chain()
    assert q < 0.1 < r


def test_progress_unit_is_exact_when_it_can_be() -> None:
    assert progress_unit(48 * 3600.0, 180.0, GAP) == 60.0
    assert progress_unit(48 * 3600.0, 0.0, GAP) == 600.0
    assert progress_unit(10_000 * 3600.0, 180.0, GAP) is None  # over MAX_UNITS at ¼ tick


def test_out_of_scope_problems_have_no_table() -> None:
    kwargs = {"job": 3600.0, "deadline": 7200.0, "gap": GAP, "q": 0.1, "r": 0.1}
    assert table_for(changeover=720.0, spot_ratio=RATIO, **kwargs) is None  # d ≥ gap
    assert table_for(changeover=600.0, spot_ratio=RATIO, **kwargs) is None
    assert table_for(changeover=180.0, spot_ratio=RATIO, **kwargs) is not None


def test_table_decisions_on_hand_checked_states() -> None:
    # 10 ticks of work, d = 0: with exactly 10 ticks left and no spot only on-demand is safe
    # (idling would leave 10 ticks of work in 9); with spot, a spot tick loses nothing even if
    # spot vanishes next (d = 0); far ahead, spot is taken and an outage is idled through.
    table = decision_table(6000.0, 0.0, GAP, 600.0, 256, 0.1, 0.3, RATIO)
    assert table.decide(10, False, 0, 0.0) == OD
    assert table.decide(10, True, 0, 0.0) == SPOT
    assert table.decide(100, True, 0, 0.0) == SPOT
    assert table.decide(100, False, 0, 0.0) == IDLE
    assert table.decide(9, False, 0, 0.0) == OD  # infeasible: on-demand, the fastest plan
    assert table.decide(0, False, 0, 0.0) == OD


def test_expected_cost_matches_simulation_on_markov_traces() -> None:
    # On traces drawn from a Markov chain the policy (which learns that chain) is not dearer than
    # uniform progress on average, and never misses.
    ours, up = [], []
    for seed in range(12):
        trace = generate_trace(200, availability=0.6, mean_outage_ticks=5.0, seed=seed)
        window = [n >= 1 for n in trace.data]
        kwargs = {
            "job_s": 60 * GAP,
            "deadline_s": 90 * GAP,
            "changeover_s": 180.0,
            "gap_s": GAP,
            "od_price": 3.06,
            "spot_price": 0.9731,
        }
        result = simulate_window(GpuleasePolicy(), window, **kwargs)
        assert result.finished
        ours.append(result.cost_ratio)
        up.append(simulate_window(UniformProgress(), window, **kwargs).cost_ratio)
    assert math.isfinite(float(np.mean(ours)))
    assert np.mean(ours) <= np.mean(up)
