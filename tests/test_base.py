"""Base helpers: clocks and the backoff/retry helper."""

from __future__ import annotations

import random

import pytest

from gpulease.backoff import backoff_delay, retry
from gpulease.clock import ScaledClock, VirtualClock
from gpulease.errors import Permanent, Retryable


def test_virtual_clock_moves_only_when_told() -> None:
    clock = VirtualClock(start=100.0)
    assert clock.now() == 100.0
    clock.sleep(5)
    clock.advance(1.5)
    assert clock.now() == 106.5
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_scaled_clock_runs_faster_than_real_time() -> None:
    clock = ScaledClock(scale=3600.0, start=0.0)
    clock.sleep(3600.0)  # one simulated hour = one real second / 3600 → ~1 ms
    assert clock.now() >= 3600.0


def test_backoff_is_capped_and_jittered() -> None:
    rng = random.Random(0)
    delays = [backoff_delay(n, base=1.0, cap=8.0, rng=rng) for n in range(1, 12)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert len(set(delays)) == len(delays)  # jitter: no two the same
    assert max(backoff_delay(1, base=1.0, rng=rng) for _ in range(50)) <= 1.0


def test_retry_retries_retryable_then_succeeds_in_virtual_time() -> None:
    clock = VirtualClock(start=0.0)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise Retryable("throttled", delay=2.0)
        return "ok"

    assert retry(flaky, clock=clock, rng=random.Random(1)) == "ok"
    assert len(calls) == 3 and clock.now() >= 4.0  # honoured the error's own delay twice


def test_retry_gives_up_after_attempts_and_never_retries_permanent() -> None:
    clock = VirtualClock()
    with pytest.raises(Retryable):
        retry(lambda: (_ for _ in ()).throw(Retryable("x", delay=0)), attempts=3, clock=clock)
    calls: list[int] = []

    def fatal() -> None:
        calls.append(1)
        raise Permanent("no")

    with pytest.raises(Permanent):
        retry(fatal, clock=clock)
    assert calls == [1]
