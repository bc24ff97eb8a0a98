"""The load balancer's sliding windows and the sample it hands the autoscaler (pure: explicit
timestamps, no server)."""

from __future__ import annotations

import pytest

from gpulease.serve.autoscale import LoadSample
from gpulease.serve.proxy import LoadStats
from gpulease.serve.proxy.stats import BINS, MAX_WINDOW_S, Window, bin_value, latency_bin


def test_a_window_keeps_percentiles_and_forgets_old_seconds() -> None:
    window = Window(started_at=0.0)
    for i in range(1, 101):  # 100 requests at 1..100 ms over t = 100..199, 5 failed
        window.record(99.0 + i, i / 1000, failed=i % 20 == 0)
    last = window.summary(at=199.5, window_s=60)
    assert (last.requests, last.failed) == (60, 3)  # the seconds 140..199
    assert last.qps == pytest.approx(1.0)
    assert last.latency_p50_s == pytest.approx(0.070, rel=0.05)
    assert last.latency_p95_s == pytest.approx(0.097, rel=0.05)
    whole = window.summary(at=199.5, window_s=300)
    assert whole.requests == 100 and whole.qps == pytest.approx(100 / 199.5)
    assert whole.latency_p50_s == pytest.approx(0.050, rel=0.05)
    assert window.summary(at=199.5 + MAX_WINDOW_S, window_s=60).requests == 0
    window.record(100.0 + MAX_WINDOW_S, 0.5, failed=False)  # lands on the bucket of t = 100
    assert window.summary(at=100.0 + MAX_WINDOW_S, window_s=MAX_WINDOW_S).requests == 100
    young = Window(started_at=1_000.0)
    young.record(1_000.2, 0.01, failed=False)
    assert young.summary(at=1_000.4, window_s=60).qps == pytest.approx(1.0)
    assert young.summary(at=1_000.4, window_s=60).latency_p50_s == pytest.approx(0.01, rel=0.05)


def test_a_sample_for_the_autoscaler_counts_queued_requests() -> None:
    stats = LoadStats(
        in_flight=3,
        queued=2,
        qps=4.5,
        latency_p50_s=0.01,
        latency_p95_s=0.02,
        requests=10,
        failed=0,
        replicas=(),
    )
    sample = stats.sample(at=12.0)
    assert isinstance(sample, LoadSample)
    assert (sample.at, sample.in_flight, sample.qps) == (12.0, 5.0, 4.5)
    assert (sample.latency_p95_s, sample.gpu_utilisation) == (0.02, None)


def test_latency_bins_cover_the_range_within_their_resolution() -> None:
    assert latency_bin(0.0) == 0 and latency_bin(10_000.0) == BINS - 1
    for latency in (2e-5, 1e-3, 0.0123, 0.5, 7.0, 600.0):
        assert bin_value(latency_bin(latency)) == pytest.approx(latency, rel=0.025)
