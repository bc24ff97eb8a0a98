"""The sampler thread: every ``interval_s``, one :class:`Sample` of the node into the ring.

Owns the pass loop and the GPU source's life: ``start`` opens the source (NVML or the fake
GPUs; a source that cannot open logs "no GPU metrics: <reason>" once and the node is still
sampled), each pass reads the host, the GPUs, the job's train figures (``train``, see
:mod:`.train`) and the latest peer round trips (``peers``, see :mod:`.peers`; never waited for)
at ``clock.now()``, ``stop`` ends the thread and closes the source. A pass that raises is
logged (once per distinct message) and skipped; the thread never dies of it.
States: new → running (``start``) → stopped (``stop``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from gpulease.agent.telemetry.host import HostSampler
from gpulease.agent.telemetry.ring import SampleRing
from gpulease.agent.telemetry.sample import GpuSample, NodeSample, PeerRtt, Sample
from gpulease.clock import Clock

log = logging.getLogger("gpulease.agent.telemetry")

DEFAULT_INTERVAL_S = 5.0
DEFAULT_CAPACITY = 720  # an hour at 5 s


class GpuSource(Protocol):
    source: str
    error: str | None

    def open(self) -> bool: ...

    def sample(self) -> list[GpuSample]: ...

    def close(self) -> None: ...


class NoGpus:
    """A node without GPU metrics (a CPU node, or sampling asked not to look)."""

    source = "none"

    def __init__(self, error: str | None = None) -> None:
        self.error = error

    def open(self) -> bool:
        return False

    def sample(self) -> list[GpuSample]:
        return []

    def close(self) -> None:
        pass


class TelemetrySampler:
    def __init__(
        self,
        ring: SampleRing,
        gpus: GpuSource,
        clock: Clock,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        host: HostSampler | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("the sampling interval must be > 0 seconds")
        self.ring = ring
        self.gpus = gpus
        self.clock = clock
        self.interval_s = interval_s
        self.host = host or HostSampler(clock)
        self.gpu_open = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_failure: str | None = None
        self.train: Callable[[float], dict[str, Any] | None] | None = None  # set by ``serve``
        self.peers: Callable[[], tuple[PeerRtt, ...]] | None = None

    @property
    def gpu_source(self) -> str:
        return self.gpus.source if self.gpu_open else "none"

    def open(self) -> None:
        self.gpu_open = self.gpus.open()

    def sample_once(self) -> Sample:
        """One pass: the host, then the GPUs, stamped with the clock; appended to the ring."""
        node = self._host()
        gpus = tuple(self.gpus.sample()) if self.gpu_open else ()
        now = self.clock.now()
        peers = self.peers() if self.peers else ()
        sample = Sample(at=now, node=node, gpus=gpus, gpu_source=self.gpu_source,
                        train=self._train(now), peers=peers)  # fmt: skip
        self.ring.append(sample)
        return sample

    def _train(self, now: float) -> dict[str, Any] | None:
        if self.train is None:
            return None
        try:
            return self.train(now)
        except Exception as exc:  # the job's file must never cost the node's sample
            self._log_failure(f"train stats failed: {type(exc).__name__}: {exc}")
            return None

    def _host(self) -> NodeSample:
        try:
            return self.host.sample()
        except Exception as exc:  # psutil on an odd kernel: GPUs are still worth reporting
            self._log_failure(f"host metrics failed: {exc}")
            return NodeSample()

    def start(self) -> None:
        """Open the GPU source and sample, in a daemon thread: ``nvmlInit`` can take a second
        on a real node, and neither the API nor the heartbeat waits for it."""
        self._thread = threading.Thread(target=self._run, name="telemetry", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.open()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:
                self._log_failure(f"telemetry pass failed: {type(exc).__name__}: {exc}")
            self._stop.wait(self.interval_s)

    def _log_failure(self, message: str) -> None:
        if message != self._last_failure:
            log.warning("%s", message)
            self._last_failure = message

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.gpus.close()


def metrics_report(sampler: TelemetrySampler | None, since: float | None) -> dict[str, Any]:
    """The body of ``GET /v1/metrics``: the buffered samples after ``since``, newest last."""
    if sampler is None:
        return {"sampling": False, "interval_s": None, "capacity": 0, "gpu_source": "none",
                "gpu_error": None, "samples": []}  # fmt: skip
    return {
        "sampling": True,
        "interval_s": sampler.interval_s,
        "capacity": sampler.ring.capacity,
        "gpu_source": sampler.gpu_source,
        "gpu_error": sampler.gpus.error,
        "samples": [s.to_json() for s in sampler.ring.since(since)],
    }
