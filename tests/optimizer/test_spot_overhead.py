"""Spot restarts: the expected stretch of wall time grows with the band, the node count and the
checkpoint interval, and a job that could not finish on spot is dropped."""

from __future__ import annotations

import numpy as np

from gpulease.optimizer import spot_overhead as so


def test_rates_grow_with_the_band_and_unknown_is_cautious() -> None:
    rates = so.hourly_rates(np.array([0, 1, 2, 3, 4, -1]))
    expected = rates[:, 1]
    assert np.all(np.diff(expected[:5]) > 0)
    assert expected[5] == expected[3]  # unknown → the 15-20 % band
    assert np.all(rates[:, 0] <= rates[:, 1]) and np.all(rates[:, 1] <= rates[:, 2])


def test_band_zero_monthly_rate_matches_its_definition() -> None:
    # 2.5 % of instances interrupted in a 730-hour month
    rate = so.hourly_rates(np.array([0]))[0, 1]
    assert abs((1 - np.exp(-rate * 730)) - 0.025) < 1e-9


def test_stretch_grows_with_nodes_and_loss() -> None:
    rate = so.hourly_rates(np.array([2]))[:, 1:2]
    one = so.stretch_factor(rate, np.array([[1.0]]), 0.5)[0, 0]
    many = so.stretch_factor(rate, np.array([[16.0]]), 0.5)[0, 0]
    longer = so.stretch_factor(rate, np.array([[1.0]]), 2.0)[0, 0]
    assert 1.0 < one < many and one < longer


def test_a_job_that_cannot_finish_on_spot_is_nan() -> None:
    rate = np.array([[0.5]])  # one interruption every two hours per node
    assert np.isnan(so.stretch_factor(rate, np.array([[8.0]]), 1.0)[0, 0])


def test_loss_is_half_an_interval_plus_a_restart() -> None:
    assert so.loss_per_interruption(1.0) == 0.5 + so.DEFAULT_RESTART_H
    assert (
        so.loss_per_interruption(None)
        == so.DEFAULT_CHECKPOINT_INTERVAL_H / 2 + so.DEFAULT_RESTART_H
    )
