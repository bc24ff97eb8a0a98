"""The server's background work: one thread that runs the cluster reconcile pass (then the
managed-jobs pass, which also relays provider events) about every
``interval_s`` (at once again after a pass that changed something, or when the API wakes it), and
the orphan sweep every ``sweep_every_s``. On start it releases the claims a dead predecessor
left and sweeps once; so a restarted server resumes every cluster from the DB. Moves states only
through the reconciler.
"""

from __future__ import annotations

import logging
import threading
import time

from gpulease.controller import Reconciler
from gpulease.controller.job_loop import JobReconciler

log = logging.getLogger("gpulease.server")


class LoopThread:
    def __init__(
        self,
        reconciler: Reconciler,
        *,
        interval_s: float = 0.5,
        sweep_every_s: float = 30.0,
        busy_gap_s: float = 0.02,
        jobs: JobReconciler | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.jobs = jobs
        self.interval_s = interval_s
        self.sweep_every_s = sweep_every_s
        self.busy_gap_s = busy_gap_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="reconcile", daemon=True)
        self.passes = 0

    def start(self) -> None:
        released = self.reconciler.release_stale_claims()
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
        next_sweep = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_sweep:
                self._guarded(self.reconciler.sweep)
                next_sweep = time.monotonic() + self.sweep_every_s
            progress = self._guarded(self.reconciler.run_pass)
            if self.jobs is not None:
                progress |= self._guarded(self.jobs.run_pass)
            self.passes += 1
            self._wake.wait(self.busy_gap_s if progress else self.interval_s)
            self._wake.clear()

    def _guarded(self, fn: object) -> bool:
        try:
            return bool(fn())  # type: ignore[operator]
        except Exception:  # the loop must outlive any one failure (the DB busy, a bug)
            log.exception("reconcile loop: %s failed", getattr(fn, "__name__", fn))
            return False
