"""The server's background work: one thread that runs the cluster reconcile pass (then the
managed-jobs pass, which also relays provider events, then the pools pass, then the services
pass) about every ``interval_s`` (at once again after a pass that changed something, or when
the API wakes it), and the orphan sweep every ``sweep_every_s``, and the budgets loop
(``server.budget_loop``) every ``budget_every_s``. On start it releases the claims a dead
predecessor left and sweeps once; so a restarted server resumes every cluster from the DB.
Moves states only through the reconciler.

Each pass is timed into :class:`PassTimes` (per loop, ``clusters``, ``jobs``, ``pools``,
``services`` and ``budgets``: count, sum and histogram buckets), which ``GET /metrics`` reads as
``gpulease_reconcile_pass_seconds``.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpulease.controller import Reconciler
from gpulease.controller.job_loop import JobReconciler
from gpulease.controller.pool_loop import PoolReconciler
from gpulease.server.budget_loop import BudgetLoop

if TYPE_CHECKING:
    from gpulease.controller.service_loop import ServiceReconciler  # the services pass

log = logging.getLogger("gpulease.server")

#: upper bounds (seconds) of the pass-duration histogram's buckets; +Inf is implied
PASS_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                                   10.0, 30.0)  # fmt: skip


@dataclass
class PassStats:
    """One loop's passes: how many, their total seconds, and the count per bucket (not
    cumulative; the last slot counts passes longer than every bound)."""

    count: int = 0
    total_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(PASS_BUCKETS) + 1))


class PassTimes:
    """Durations of the reconcile passes, per loop; written by the loop thread, read by a
    scrape (a lock guards both)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, PassStats] = {}

    def observe(self, loop: str, seconds: float) -> None:
        with self._lock:
            stats = self._stats.setdefault(loop, PassStats())
            stats.count += 1
            stats.total_s += seconds
            stats.buckets[bisect.bisect_left(PASS_BUCKETS, seconds)] += 1

    def snapshot(self) -> dict[str, PassStats]:
        """A copy of every loop's stats."""
        with self._lock:
            return {name: PassStats(s.count, s.total_s, list(s.buckets))
                    for name, s in self._stats.items()}  # fmt: skip


class LoopThread:
    def __init__(
        self,
        reconciler: Reconciler,
        *,
        interval_s: float = 0.5,
        sweep_every_s: float = 30.0,
        busy_gap_s: float = 0.02,
        jobs: JobReconciler | None = None,
        budgets: BudgetLoop | None = None,
        budget_every_s: float = 5.0,
        pools: PoolReconciler | None = None,
        services: ServiceReconciler | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.jobs = jobs
        self.pools = pools  # the pools loop, after the jobs pass (it sizes by their queue)
        self.services = services  # stepped after the clusters, the jobs and the pools
        self.budgets = budgets  # ``budgets:`` of the config, stepped every budget_every_s
        self.budget_every_s = budget_every_s
        self.interval_s = interval_s
        self.sweep_every_s = sweep_every_s
        self.busy_gap_s = busy_gap_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="reconcile", daemon=True)
        self.passes = 0
        self.times = PassTimes()

    def start(self) -> None:
        released = self.reconciler.release_stale_claims()
        if self.services is not None:
            released += self.services.release_stale_claims()
        if released:
            log.info("released %d claim(s) left by a previous server", released)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _main(self) -> None:
        next_sweep = next_budgets = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_sweep:
                self._guarded(self.reconciler.sweep)
                next_sweep = time.monotonic() + self.sweep_every_s
            if self.budgets is not None and time.monotonic() >= next_budgets:
                self._timed("budgets", self.budgets.run_pass)
                next_budgets = time.monotonic() + self.budget_every_s
            progress = self._timed("clusters", self.reconciler.run_pass)
            if self.jobs is not None:
                progress |= self._timed("jobs", self.jobs.run_pass)
            if self.pools is not None:
                progress |= self._timed("pools", self.pools.run_pass)
            if self.services is not None:
                progress |= self._timed("services", self.services.run_pass)
            self.passes += 1
            self._wake.wait(self.busy_gap_s if progress else self.interval_s)
            self._wake.clear()

    def _timed(self, loop: str, fn: Callable[[], object]) -> bool:
        started = time.perf_counter()
        try:
            return self._guarded(fn)
        finally:
            self.times.observe(loop, time.perf_counter() - started)

    def _guarded(self, fn: object) -> bool:
        try:
            return bool(fn())  # type: ignore[operator]
        except Exception:  # the loop must outlive any one failure (the DB busy, a bug)
            log.exception("reconcile loop: %s failed", getattr(fn, "__name__", fn))
            return False
