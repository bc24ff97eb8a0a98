"""The load balancer's measurements: sliding windows of completed requests, and their snapshots.

Owns :class:`Window` (what one replica, or the whole balancer, completed over the last seconds)
and the frozen snapshots the balancer hands out, :class:`ReplicaStats` and :class:`LoadStats`,
with :meth:`LoadStats.sample`, the autoscaler's input. Moves no state of its own beyond the
window's buckets; callers serialise access (the backend pool's lock).

Bounded memory: a window is a ring of ``MAX_WINDOW_S`` per-second buckets, indexed by the
second (from the injected clock) modulo the ring's length; a bucket is reset when a new second
lands on it. Each bucket counts the requests and failures completed in its second and keeps
their latencies as a sparse log-scale histogram (bins ``RATIO`` = 5 % apart from
``LATENCY_FLOOR_S`` up to ``LATENCY_CAP_S``), so a bucket holds at most ``BINS`` counters
whatever the request rate, and percentiles are within ±2.5 % of the true sample's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulease.serve.autoscale import LoadSample

MAX_WINDOW_S = 600
LATENCY_FLOOR_S = 1e-5
LATENCY_CAP_S = 3600.0
RATIO = 1.05
_LOG_RATIO = math.log(RATIO)
BINS = math.ceil(math.log(LATENCY_CAP_S / LATENCY_FLOOR_S) / _LOG_RATIO) + 1


def latency_bin(latency_s: float) -> int:
    """The histogram bin of a latency (0 at or below the floor, ``BINS - 1`` at the cap)."""
    if latency_s <= LATENCY_FLOOR_S:
        return 0
    index = int(math.log(latency_s / LATENCY_FLOOR_S) / _LOG_RATIO) + 1
    return min(index, BINS - 1)


def bin_value(index: int) -> float:
    """A bin's representative latency: the geometric middle of its bounds."""
    if index <= 0:
        return LATENCY_FLOOR_S
    return float(LATENCY_FLOOR_S * RATIO ** (index - 0.5))


class _Bucket:
    __slots__ = ("failed", "hist", "requests", "second")

    def __init__(self, second: int) -> None:
        self.second = second
        self.requests = 0
        self.failed = 0
        self.hist: dict[int, int] = {}


@dataclass(frozen=True)
class WindowSummary:
    """What a window holds over its last ``window_s`` seconds."""

    requests: int
    failed: int
    qps: float
    latency_p50_s: float | None
    latency_p95_s: float | None


class Window:
    """Requests completed per second over the last ``MAX_WINDOW_S`` seconds (not thread-safe)."""

    def __init__(self, started_at: float) -> None:
        self._ring: list[_Bucket | None] = [None] * MAX_WINDOW_S
        self.started_at = started_at

    def record(self, at: float, latency_s: float, *, failed: bool) -> None:
        second = math.floor(at)
        slot = second % MAX_WINDOW_S
        bucket = self._ring[slot]
        if bucket is None or bucket.second != second:
            bucket = self._ring[slot] = _Bucket(second)
        bucket.requests += 1
        bucket.failed += int(failed)
        index = latency_bin(latency_s)
        bucket.hist[index] = bucket.hist.get(index, 0) + 1

    def summary(self, at: float, window_s: float) -> WindowSummary:
        """Requests, failures, QPS and latency percentiles of the seconds in ``(at - window_s,
        at]``; QPS divides by the window, or by the time since ``started_at`` when shorter
        (at least one second), so a new replica's rate is not diluted by seconds it did not
        live."""
        window_s = min(max(window_s, 1.0), float(MAX_WINDOW_S))
        now = math.floor(at)
        oldest = now - math.ceil(window_s) + 1
        requests = failed = 0
        hist: dict[int, int] = {}
        for bucket in self._ring:
            if bucket is None or not oldest <= bucket.second <= now:
                continue
            requests += bucket.requests
            failed += bucket.failed
            for index, count in bucket.hist.items():
                hist[index] = hist.get(index, 0) + count
        span = max(1.0, min(window_s, at - self.started_at))
        return WindowSummary(
            requests=requests,
            failed=failed,
            qps=requests / span,
            latency_p50_s=percentile(hist, 0.50),
            latency_p95_s=percentile(hist, 0.95),
        )


def percentile(hist: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0..1) of a binned sample; None when it is empty."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index in sorted(hist):
        seen += hist[index]
        if seen >= rank:
            return bin_value(index)
    return bin_value(max(hist))  # pragma: no cover - the loop always reaches rank


@dataclass(frozen=True)
class ReplicaStats:
    """One backend: requests in flight now, totals since it was added (``requests`` completed,
    ``failed`` of them: the connection failed or the replica answered 5xx), and over the
    window its QPS and latency percentiles (request sent → response body ended)."""

    id: int
    in_flight: int
    requests: int
    failed: int
    qps: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    draining: bool = False


@dataclass(frozen=True)
class LoadStats:
    """The whole balancer as its clients see it: requests in flight at replicas, ``queued``
    ones waiting for a replica, totals since start (``failed``: answered 5xx, the balancer's own
    502 / 503 included), and over the window the QPS and latency percentiles (arrival →
    response body ended, queueing included); ``replicas`` by id."""

    in_flight: int
    queued: int
    qps: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    requests: int
    failed: int
    replicas: tuple[ReplicaStats, ...]

    def sample(self, at: float) -> LoadSample:
        """The autoscaler's sample: queued requests count as load (scale to zero: a request
        waiting makes ``in_flight`` > 0)."""
        from gpulease.serve.autoscale import LoadSample

        return LoadSample(
            at=at,
            in_flight=float(self.in_flight + self.queued),
            qps=self.qps,
            latency_p95_s=self.latency_p95_s,
            gpu_utilisation=None,
        )
