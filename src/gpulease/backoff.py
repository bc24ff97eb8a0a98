"""The one backoff helper: capped, jittered exponential delays ("full jitter"), and a retry loop
for :class:`~gpulease.errors.Retryable` errors that honours their own ``delay``.

It is a few lines of its own, not a retry library such as tenacity (not a dependency), because it
sleeps on an injected :class:`~gpulease.clock.Clock`: loops and tests in virtual time back off
without waiting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from gpulease.clock import Clock, SystemClock
from gpulease.errors import Retryable

T = TypeVar("T")


def backoff_delay(
    attempt: int, *, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None
) -> float:
    """Delay before retry number ``attempt`` (1-based): uniform in [0, min(cap, base·2^(n−1))]."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    ceiling = min(cap, base * 2 ** (attempt - 1))
    return (rng or random).uniform(0.0, ceiling)


def retry(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base: float = 0.5,
    cap: float = 30.0,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    on_retry: Callable[[int, Retryable, float], None] | None = None,
) -> T:
    """Call ``fn``; on :class:`Retryable`, wait (the larger of its ``delay`` and the jittered
    backoff) and try again, at most ``attempts`` times in all; other errors propagate at once."""
    clock = clock or SystemClock()
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Retryable as exc:
            if attempt == attempts:
                raise
            wait = max(exc.delay, backoff_delay(attempt, base=base, cap=cap, rng=rng))
            if on_retry:
                on_retry(attempt, exc, wait)
            clock.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
