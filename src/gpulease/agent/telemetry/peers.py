"""Round trips to the cluster's other nodes: a TCP connect to each peer's agent.

A multi-node task's submission says where its nodes are (``node_ips``, ``agent_ports`` by rank;
a port not given is this agent's own, for providers that bind one fixed port everywhere).
:class:`PeerProber`'s daemon thread connects to every other node's agent each ``interval_s``
(``timeout_s`` each, never longer) and keeps the latest :class:`PeerRtt` per rank; the sampler
takes them without waiting (:meth:`PeerProber.latest`). The round trip is the time from the
connect call to its answer: an accepted connection (SYN, SYN-ACK) or a refusal (SYN, RST; an
agent bound only to loopback still answers so) both took one round trip; no answer within the
timeout, or an unreachable address, is ``rtt_s: None``. One node: no peers. States: new →
running (``start``) → stopped (``stop``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpulease.agent.telemetry.sample import PeerRtt

log = logging.getLogger("gpulease.agent.telemetry")

DEFAULT_TIMEOUT_S = 1.0


@dataclass(frozen=True, slots=True)
class Peer:
    node_rank: int
    host: str
    port: int


def connect_rtt(host: str, port: int, timeout_s: float) -> float | None:
    """Seconds a TCP connect to ``host:port`` took to be answered (accepted or refused); None
    without an answer within ``timeout_s``."""
    started = time.perf_counter()
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        pass  # the RST came back: a round trip all the same
    except OSError:
        return None
    return time.perf_counter() - started


class PeerProber:
    """Probes the peers ``targets()`` names (re-read each round: a new task brings new peers)."""

    def __init__(
        self,
        targets: Callable[[], Sequence[Peer]],
        *,
        interval_s: float,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        probe: Callable[[str, int, float], float | None] = connect_rtt,
    ) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.probe = probe
        self._latest: tuple[PeerRtt, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_failure: str | None = None

    def latest(self) -> tuple[PeerRtt, ...]:
        """The last round's results, by rank (empty before the first, or with no peers)."""
        return self._latest

    def probe_once(self) -> tuple[PeerRtt, ...]:
        peers = sorted(self.targets(), key=lambda p: p.node_rank)
        results = tuple(
            PeerRtt(p.node_rank, self.probe(p.host, p.port, self.timeout_s)) for p in peers
        )
        self._latest = results
        return results

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="peers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.probe_once()
            except Exception as exc:  # a bad target list must not end the probes
                message = f"peer round trips failed: {type(exc).__name__}: {exc}"
                if message != self._last_failure:
                    log.warning("%s", message)
                    self._last_failure = message
            self._stop.wait(self.interval_s)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
