"""A pass run every interval on a thread of its own, beside the reconcile loop: the telemetry
relay (:mod:`.telemetry.relay`) and the services' load history (:mod:`.service_load`). Owns
:class:`PeriodicThread`: start, stop (with a timeout; ``on_stopped`` once the thread is gone), a
pass that raises is logged and the next one runs on time. Moves no states.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("gpulease.server")


class PeriodicThread:
    """Runs ``run_pass`` every ``interval_s()`` seconds (measured from the start of a pass)."""

    def __init__(
        self,
        name: str,
        run_pass: Callable[[], object],
        interval_s: Callable[[], float],
        *,
        on_stopped: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._run_pass = run_pass
        self._interval_s = interval_s
        self._on_stopped = on_stopped
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if not self._thread.is_alive() and self._on_stopped is not None:
            self._on_stopped()

    def _main(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._run_pass()
            except Exception:  # the DB busy, a bug: the next pass tries again
                log.exception("%s: a pass failed", self.name)
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self._interval_s() - elapsed))
