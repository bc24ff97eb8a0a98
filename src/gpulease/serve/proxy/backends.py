"""The backend pool: which replicas take new requests, which one gets the next, and draining.

Owns the per-backend state under one lock, so that the server's thread (``set_backends``,
``drain``, ``drained``, ``stats``) and the balancer's loop thread (``pick`` / ``finish`` per
request) can share it. A backend moves

    listed ──drain()──▶ draining ──last request finished──▶ drained
    listed ──left out of set_backends()──▶ draining ──last request finished──▶ forgotten

and, on a connection failure, is *ejected* for ``eject_s`` seconds: it takes new requests only
when no other routable backend is left (a replica that died stops drawing requests before the
controller notices). The choice is least in flight among the routable backends, ties broken
round robin. Requests that find no routable backend wait in the pool's queue (scale to zero)
until ``set_backends`` brings one, their deadline passes or the balancer stops (``close``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpulease.clock import Clock
from gpulease.serve.proxy.stats import LoadStats, ReplicaStats, Window


@dataclass(frozen=True)
class Backend:
    """A ready replica: its id (the controller's) and base URL, ``http://host:port``."""

    id: int
    url: str


class Slot:
    """One backend's live state (read by the request path; written under the pool's lock)."""

    __slots__ = (
        "backend",
        "down_until",
        "draining",
        "failed",
        "in_flight",
        "listed",
        "requests",
        "window",
    )

    def __init__(self, backend: Backend, now: float) -> None:
        self.backend = backend
        self.in_flight = 0
        self.requests = 0
        self.failed = 0
        self.draining = False
        self.listed = True
        self.down_until = 0.0
        self.window = Window(now)

    @property
    def routable(self) -> bool:
        return self.listed and not self.draining


class BackendPool:
    """Thread-safe backend set; ``bind`` it to the loop whose waiters ``set_backends`` wakes."""

    def __init__(self, clock: Clock, *, eject_s: float = 2.0) -> None:
        self._clock = clock
        self._eject_s = eject_s
        self._lock = threading.Lock()
        self._slots: dict[int, Slot] = {}
        self._rr = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self.queued = 0
        self.closed = False
        self.overall = Window(clock.now())
        self.requests = 0
        self.failed = 0

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on ``loop``'s thread before it serves."""
        self._loop = loop
        self._changed = asyncio.Event()

    # --- the server's side ---------------------------------------------------------------------

    def set_backends(self, backends: Sequence[Backend]) -> None:
        now = self._clock.now()
        with self._lock:
            wanted = {b.id: b for b in backends}
            for sid, slot in list(self._slots.items()):
                if sid not in wanted:
                    slot.listed = False
                    if slot.in_flight == 0:
                        del self._slots[sid]
            for bid, backend in wanted.items():
                known = self._slots.get(bid)
                if known is None:
                    self._slots[bid] = Slot(backend, now)
                else:
                    known.backend = backend
                    known.listed = True
        self._notify()

    def drain(self, backend_id: int) -> None:
        with self._lock:
            slot = self._slots.get(backend_id)
            if slot is not None:
                slot.draining = True

    def drained(self, backend_id: int) -> bool:
        with self._lock:
            slot = self._slots.get(backend_id)
            return slot is None or slot.in_flight == 0

    def _notify(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between check and call
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    # --- the request path (the loop's thread) ---------------------------------------------------

    def pick(self, exclude: Collection[int] = ()) -> Slot | None:
        """The routable backend with the fewest in flight (ties: round robin), its in-flight
        count already raised; None when there is none."""
        mono = time.monotonic()
        with self._lock:
            slots = [s for s in self._slots.values() if s.routable and s.backend.id not in exclude]
            if not slots:
                return None
            healthy = [s for s in slots if s.down_until <= mono]
            candidates = healthy or slots
            count = len(candidates)
            start = self._rr % count
            self._rr += 1
            best = candidates[start]
            for offset in range(1, count):
                slot = candidates[(start + offset) % count]
                if slot.in_flight < best.in_flight:
                    best = slot
            best.in_flight += 1
            return best

    async def wait_pick(self, deadline: float) -> Slot | None:
        """``pick``, waiting in the queue (until ``deadline`` on the loop's clock) while no
        backend is routable."""
        slot = self.pick()
        if slot is not None:
            return slot
        loop = asyncio.get_running_loop()
        with self._lock:
            self.queued += 1
        try:
            while slot is None:
                changed = self._changed
                remaining = deadline - loop.time()
                if changed is None or remaining <= 0 or self.closed:
                    return None
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    return None
                slot = self.pick()
            return slot
        finally:
            with self._lock:
                self.queued -= 1

    def close(self) -> None:
        """On the loop's thread, at stop: the queue empties (its requests get their 503)."""
        self.closed = True
        self._wake()

    def eject(self, slot: Slot) -> None:
        with self._lock:
            slot.down_until = time.monotonic() + self._eject_s

    def finish(self, slot: Slot, latency_s: float, *, failed: bool) -> None:
        """One request at ``slot`` is over (answered, or its connection failed)."""
        now = self._clock.now()
        with self._lock:
            slot.in_flight -= 1
            slot.requests += 1
            slot.failed += int(failed)
            slot.window.record(now, latency_s, failed=failed)
            if not slot.listed and slot.in_flight == 0:
                self._slots.pop(slot.backend.id, None)

    def record(self, latency_s: float, *, failed: bool) -> None:
        """One client request is over, as its client saw it."""
        now = self._clock.now()
        with self._lock:
            self.requests += 1
            self.failed += int(failed)
            self.overall.record(now, latency_s, failed=failed)

    # --- snapshots -----------------------------------------------------------------------------

    def stats(self, window_s: float) -> LoadStats:
        now = self._clock.now()
        with self._lock:
            slots = [slot for _, slot in sorted(self._slots.items())]
            overall = self.overall.summary(now, window_s)
            return LoadStats(
                in_flight=sum(slot.in_flight for slot in slots),
                queued=self.queued,
                qps=overall.qps,
                latency_p50_s=overall.latency_p50_s,
                latency_p95_s=overall.latency_p95_s,
                requests=self.requests,
                failed=self.failed,
                replicas=tuple(_replica_stats(slot, now, window_s) for slot in slots),
            )


def _replica_stats(slot: Slot, now: float, window_s: float) -> ReplicaStats:
    summary = slot.window.summary(now, window_s)
    return ReplicaStats(
        id=slot.backend.id,
        in_flight=slot.in_flight,
        requests=slot.requests,
        failed=slot.failed,
        qps=summary.qps,
        latency_p50_s=summary.latency_p50_s,
        latency_p95_s=summary.latency_p95_s,
        draining=not slot.routable,
    )
