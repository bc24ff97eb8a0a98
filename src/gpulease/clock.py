"""Injected time: every loop and provider takes a :class:`Clock`, so tests and the sim provider run
in virtual or scaled time.

- :class:`SystemClock` — real wall time.
- :class:`VirtualClock` — time moves only when told (``advance``) or when someone sleeps on it.
- :class:`ScaledClock` — wall time × ``scale`` from a start point (the sim provider: one simulated
  hour per real second is ``scale=3600``).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch, in this clock's time."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class VirtualClock:
    """A clock that only moves when advanced; ``sleep`` advances it (single-threaded tests)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))


class ScaledClock:
    """``scale`` seconds of clock time per real second, starting at ``start`` (default: now)."""

    def __init__(self, scale: float, start: float | None = None) -> None:
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.scale = scale
        self._real0 = time.monotonic()
        self._start = time.time() if start is None else start

    def now(self) -> float:
        return self._start + (time.monotonic() - self._real0) * self.scale

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds / self.scale)
