"""Polling helper for tests: wait for a condition with the project's jittered backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from gpulease.backoff import backoff_delay

T = TypeVar("T")


def wait_until(
    fn: Callable[[], T | None],
    timeout: float = 60.0,
    what: str = "it",
    *,
    base: float = 0.02,
    cap: float = 0.25,
) -> T:
    """Poll ``fn`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        attempt += 1
        time.sleep(backoff_delay(attempt, base=base, cap=cap))
