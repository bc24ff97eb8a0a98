"""The recent load of each service, in the server's memory: every ``step_s`` (the telemetry
interval, ``server.telemetry.interval_s``, 10 s by default) a point per open endpoint — QPS and
p50 / p95 latency (the balancer's figures over its last minute), requests in flight and queued,
the replicas behind it (not draining) — kept for :data:`KEEP_S`. What
``GET /v1/services/{name}/load`` answers and the dashboard's service page charts.

Owns :class:`LoadHistory` (one pass, clock injected) and :class:`LoadHistoryThread` (its own
thread). Memory only, as the balancers' counters are: a server restart starts it empty; at most
``KEEP_S / step_s`` points a service (360 at 10 s), a closed endpoint's points are dropped.

Why not the reconcile skeleton (``controller/skeleton.py``): it steps claimed DB rows; this reads
the balancers in this process and writes no row, so there is nothing to claim or reconcile. It
keeps the skeleton's error discipline: a failed pass is logged and the next one runs.

Moves no states.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gpulease.clock import Clock
from gpulease.server.periodic import PeriodicThread

if TYPE_CHECKING:
    from gpulease.serve.proxy import LoadStats

log = logging.getLogger("gpulease.server")

#: how long the points are kept
KEEP_S = 3600.0


class Balancers(Protocol):
    """What the history reads of :class:`~gpulease.server.endpoints.Endpoints`."""

    def open_ids(self) -> list[int]: ...

    def stats(self, service_id: int) -> LoadStats | None: ...


@dataclass(frozen=True, slots=True)
class LoadPoint:
    at: float
    qps: float
    latency_p50_ms: float | None
    latency_p95_ms: float | None
    in_flight: int
    queued: int
    replicas: int  # behind the balancer and not draining


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000.0, 3) if seconds is not None else None


def point_of(stats: LoadStats, at: float) -> LoadPoint:
    return LoadPoint(
        at=at, qps=round(stats.qps, 3), latency_p50_ms=_ms(stats.latency_p50_s),
        latency_p95_ms=_ms(stats.latency_p95_s), in_flight=stats.in_flight, queued=stats.queued,
        replicas=sum(1 for r in stats.replicas if not r.draining),
    )  # fmt: skip


class LoadHistory:
    """The last :data:`KEEP_S` of each open endpoint's load, one point a pass; thread-safe."""

    def __init__(self, balancers: Balancers, clock: Clock, *, step_s: float = 10.0) -> None:
        self.balancers = balancers
        self.clock = clock
        self.step_s = step_s
        self._lock = threading.Lock()
        self._points: dict[int, deque[LoadPoint]] = {}

    def run_pass(self) -> int:
        """A point of every open endpoint now; forget the closed ones. The points taken."""
        now = self.clock.now()
        taken: dict[int, LoadPoint] = {}
        for service_id in self.balancers.open_ids():
            stats = self.balancers.stats(service_id)
            if stats is not None:
                taken[service_id] = point_of(stats, now)
        kept = max(1, int(KEEP_S / self.step_s) + 1)
        with self._lock:
            for gone in set(self._points) - set(taken):
                del self._points[gone]
            for service_id, point in taken.items():
                ring = self._points.setdefault(service_id, deque(maxlen=kept))
                ring.append(point)
                while ring and ring[0].at < now - KEEP_S:
                    ring.popleft()
        return len(taken)

    def points(self, service_id: int, since: float | None = None) -> list[dict[str, Any]]:
        """The service's points from ``since`` on (all kept when None), oldest first."""
        with self._lock:
            ring: Iterable[LoadPoint] = tuple(self._points.get(service_id, ()))
        return [asdict(p) for p in ring if since is None or p.at >= since]


class LoadHistoryThread(PeriodicThread):
    """Runs :meth:`LoadHistory.run_pass` every ``step_s`` on a thread of its own."""

    def __init__(self, history: LoadHistory) -> None:
        self.history = history
        super().__init__("service-load", history.run_pass, lambda: history.step_s)
