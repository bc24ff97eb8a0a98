"""The telemetry relay: every ``server.telemetry.interval_s``, pull each live node's new agent
samples (``GET /v1/metrics?since=<last at>``), fold them into ``telemetry_points`` at 10 s and
60 s, prune by retention, stamp ``clusters.gpu_active_at``, keep each node's newest raw sample
(:class:`~gpulease.server.telemetry.latest.LatestSamples`) and render the relayed Prometheus
text of the nodes with new samples (:class:`~gpulease.server.telemetry.prom.RelayedMetrics`).

Owns :class:`Relay` (one pass, clock injected) and :class:`RelayThread` (its own thread, so a
slow or silent agent never delays the reconcile loops). A pass takes the live nodes in batches
of :data:`BATCH_NODES` (pulled :data:`PULL_WORKERS` at a time), and folds, upserts and drops
each batch's samples before the next, so its memory is one batch's answers, not the fleet's.
Per node it keeps, in memory, the last sample time seen and the running accumulators of its
open 10 s and 60 s buckets (:class:`~gpulease.server.telemetry.fold.Bucket`: sums and counts,
last values, unions; no raw samples); each pass adds the new samples to them and upserts the
buckets they touched, so a repeated pass writes the same rows.

Where a node starts: with a stored 60 s point, from the start of its newest one (the agent's
ring hands those samples over again and both resolutions' open buckets are rebuilt whole,
replacing the stored rows with the same folds or fuller ones); when that point is older than
the first-pull window (:func:`first_pull_s`: a minute, or 3 relay intervals when longer), or
with no stored point, from the start of the 60 s bucket holding the window's start: at most two
minutes of samples, whole buckets, not the agent's whole ring (720 samples for an agent up an
hour; older samples are not backfilled, and no stored row is replaced by a partial one). A
batch whose write fails rewinds its nodes to the start of their open buckets, so the next pass
pulls those samples again and rebuilds them. An agent that does not answer is skipped, logged
once per outage (and once when it answers again), and retried after a jittered backoff
(:func:`gpulease.backoff.backoff_delay`).

Why not the reconcile skeleton (``controller/skeleton.py``): the skeleton steps *claimed* rows
(claim → snapshot → decide → apply under the claim). The relay's entities are nodes, which have
no claim columns, and claiming their clusters would take the cluster loop's claims (the brief
forbids it) and make a stuck agent hold a cluster's reconcile back. Its writes need no claim:
they are idempotent upserts of rows no one else writes, plus one timestamp column
(``gpu_active_at``) that only the relay writes. It keeps the skeleton's error discipline: a node
that fails backs off (capped, jittered), one log line per outage, the loop never dies of one node.

Moves no states (``gpu_active_at`` is a plain timestamp; the autostop rule reads it).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Engine, select, update

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.controller import NodeRef
from gpulease.server.agents import HttpAgents
from gpulease.server.periodic import PeriodicThread
from gpulease.server.runtime import PassTimes
from gpulease.server.telemetry.fold import (
    RESOLUTIONS,
    Bucket,
    bucket_start,
    gpu_utilisations,
    train_step,
)
from gpulease.server.telemetry.latest import LatestSamples
from gpulease.server.telemetry.memory import trim
from gpulease.server.telemetry.prom import STALE_INTERVALS, NodeLabels, RelayedMetrics
from gpulease.server.telemetry.settings import TelemetrySettings
from gpulease.server.telemetry.store import PointRow, prune, resume_points, upsert_points
from gpulease.state import session_scope
from gpulease.state.machines import ClusterStatus, NodeState
from gpulease.state.models import Cluster, Node

log = logging.getLogger("gpulease.server.telemetry")

#: GPU utilisation (%) that counts as busy when the cluster sets no ``autostop_gpu_below``
DEFAULT_ACTIVE_PCT = 5.0
RELAYED_NODES = (NodeState.SETTING_UP, NodeState.READY)
PRUNE_EVERY_S = 60.0
#: a resumed node re-reads this much before its newest stored bucket (a sample on the boundary)
_EDGE_S = 1e-3
#: nodes pulled, folded, written and rendered together (a pass holds one batch's answers)
BATCH_NODES = 50
#: agents pulled at once (the pull is I/O bound; the agent's answer is parsed in its thread)
PULL_WORKERS = 4
#: the least a node with no recent stored point is asked for, in seconds
FIRST_PULL_S = 60.0


class MetricsPort(Protocol):
    """How the relay reaches a node's agent: ``GET /v1/metrics?since=``."""

    def metrics(self, node: NodeRef, since: float | None) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LiveNode:
    """One node to pull, with what its points and series are labelled with."""

    ref: NodeRef
    labels: NodeLabels
    active_below: float | None

    @property
    def key(self) -> tuple[int, int]:
        return self.labels.cluster_id, self.labels.node_rank


def first_pull_s(interval_s: float) -> float:
    """How far back a node with no recent stored point is first asked for."""
    return max(FIRST_PULL_S, STALE_INTERVALS * interval_s)


@dataclass
class _Track:
    """What the relay remembers of one node between passes: ``open``, per resolution, the
    start and accumulators of the bucket that holds ``last_at``."""

    instance_id: str
    last_at: float | None
    open: dict[int, tuple[float, Bucket]] = field(default_factory=dict)
    last_step: int | None = None
    failures: int = 0
    retry_at: float = float("-inf")

    def saved(self) -> tuple[float | None, int | None]:
        """Where to rewind to if this pass's write fails: the open buckets' start (they are
        pulled again and rebuilt whole), and the step seen."""
        starts = [start for start, _ in self.open.values()]
        since = min(starts) - _EDGE_S if starts else self.last_at
        return since, self.last_step

    def rewind(self, saved: tuple[float | None, int | None]) -> None:
        self.last_at, self.last_step = saved
        self.open.clear()


class Relay:
    def __init__(
        self,
        engine: Engine,
        port: MetricsPort,
        settings: TelemetrySettings,
        *,
        clock: Clock,
        latest: LatestSamples | None = None,
        metrics: RelayedMetrics | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.engine = engine
        self.port = port
        self.settings = settings
        self.clock = clock
        self.latest = latest if latest is not None else LatestSamples()
        self.metrics = metrics if metrics is not None else RelayedMetrics(settings.interval_s)
        self.rng = rng
        self.times = PassTimes()
        self._tracks: dict[tuple[int, int], _Track] = {}
        self._next_prune = float("-inf")
        self._relayed = 0
        self._pool: ThreadPoolExecutor | None = None

    def run_pass(self) -> int:
        """Pull every live node once, a batch at a time; how many samples were folded in."""
        started = time.perf_counter()
        self._relayed = 0
        nodes = self._live_nodes()
        self._forget_all_but(nodes)
        self._resume(nodes)
        for first in range(0, len(nodes), BATCH_NODES):
            self._batch(nodes[first : first + BATCH_NODES])
        now = self.clock.now()
        self._prune(now)
        self.times.observe("relay", time.perf_counter() - started)
        self.metrics.update([(n.labels, self.latest.get(n.key)) for n in nodes], now, self.times)
        trim()  # what the pass's batches freed goes back to the system, not kept by the heap
        return self._relayed

    def close(self) -> None:
        """Stop the pull threads (a later pass starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _batch(self, batch: Sequence[LiveNode]) -> None:
        """Pull, fold and write one batch of nodes; its samples are dropped on return."""
        now = self.clock.now()
        due = [n for n in batch if now >= self._tracks[n.key].retry_at]
        saved = {n.key: self._tracks[n.key].saved() for n in due}
        rows: list[PointRow] = []
        active: set[int] = set()
        for node, answer in zip(due, self._ask(due), strict=True):
            try:
                rows.extend(self._take(node, answer, active))
            except Exception as exc:  # a sample this code cannot fold: that node backs off
                self._failed(node, self._tracks[node.key], exc, self.clock.now(), "failed")
        try:
            self._write(rows, active, self.clock.now())
        except Exception:  # nothing stored: the next pass asks the agents for these samples again
            for key, state in saved.items():
                self._tracks[key].rewind(state)
            raise

    def _ask(self, nodes: Sequence[LiveNode]) -> list[Mapping[str, Any] | Exception]:
        """Each node's answer to ``GET /v1/metrics?since=`` (or why there is none), in order."""

        def one(node: LiveNode) -> Mapping[str, Any] | Exception:
            try:
                return self.port.metrics(node.ref, self._tracks[node.key].last_at)
            except Exception as exc:  # an agent away or broken: that node is skipped
                return exc

        if len(nodes) <= 1:
            return [one(n) for n in nodes]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(PULL_WORKERS, thread_name_prefix="telemetry-pull")
        return list(self._pool.map(one, nodes))

    def _write(self, rows: Sequence[PointRow], active: set[int], now: float) -> None:
        if not rows and not active:
            return
        with session_scope(self.engine) as session:
            upsert_points(session, rows)
            if active:
                session.execute(
                    update(Cluster).where(Cluster.id.in_(sorted(active))).values(gpu_active_at=now)
                )

    def _prune(self, now: float) -> None:
        if now < self._next_prune:
            return
        with session_scope(self.engine) as session:
            pruned = prune(session, self.settings.retention_s, now)
        self._next_prune = now + PRUNE_EVERY_S
        if pruned:
            log.debug("telemetry: pruned %d point(s) past retention", pruned)

    def _live_nodes(self) -> list[LiveNode]:
        with session_scope(self.engine) as session:
            found = session.execute(
                select(Node, Cluster)
                .join(Cluster, Node.cluster_id == Cluster.id)
                .where(
                    Node.state.in_(list(RELAYED_NODES)),
                    Node.agent_url.is_not(None),
                    Cluster.status != ClusterStatus.TERMINATED,
                )
                .order_by(Cluster.id, Node.node_rank)
            ).all()
            return [_live_node(node, cluster) for node, cluster in found]

    def _forget_all_but(self, nodes: Sequence[LiveNode]) -> None:
        wanted = {n.key: n.ref.instance_id for n in nodes}
        for key in list(self._tracks):
            if wanted.get(key) != self._tracks[key].instance_id:
                del self._tracks[key]
        self.latest.keep_only(wanted)

    def _resume(self, nodes: Sequence[LiveNode]) -> None:
        """Tracks for the nodes seen first now (see the module's docstring: where they start)."""
        new = [n for n in nodes if n.key not in self._tracks]
        if not new:
            return
        with session_scope(self.engine) as session:
            stored = resume_points(session, {n.key[0] for n in new}, RESOLUTIONS[-1])
        earliest = self.clock.now() - first_pull_s(self.settings.interval_s)
        for node in new:
            since = _first_since(stored.get(node.key), earliest)
            self._tracks[node.key] = _Track(node.ref.instance_id, since)

    def _take(
        self, node: LiveNode, answer: Mapping[str, Any] | Exception, active: set[int]
    ) -> list[PointRow]:
        """One node's answer folded into its open buckets: the rows they make now."""
        track = self._tracks[node.key]
        now = self.clock.now()
        try:
            if isinstance(answer, Exception):
                raise answer
            samples = _new_samples(answer, track.last_at)
        except Exception as exc:  # an agent away or broken: skip it, the pass goes on
            self._failed(node, track, exc, now)
            return []
        if track.failures:
            log.info("telemetry: node %s: relayed again", _name(node))
            track.failures, track.retry_at = 0, float("-inf")
        if not samples:
            return []
        period = answer.get("interval_s")
        period = float(period) if isinstance(period, int | float) and period > 0 else None
        window = STALE_INTERVALS * max(self.settings.interval_s, period or 0.0)
        if self._active(node, track, samples, now - window):
            active.add(node.labels.cluster_id)
        self.latest.put(*node.key, samples[-1], period)
        self._relayed += len(samples)
        return self._fold(node, track, samples)

    def _failed(
        self, node: LiveNode, track: _Track, exc: Exception, now: float, what: str = "no answer"
    ) -> None:
        track.failures += 1
        base = self.settings.interval_s
        track.retry_at = now + backoff_delay(track.failures, base=base, cap=30 * base,
                                             rng=self.rng)  # fmt: skip
        if track.failures == 1:
            log.warning("telemetry: node %s: %s (%s: %s); retrying with backoff", _name(node),
                        what, type(exc).__name__, exc)  # fmt: skip

    def _active(
        self, node: LiveNode, track: _Track, samples: Sequence[Mapping[str, Any]], after: float
    ) -> bool:
        """Whether, in the samples taken after ``after`` (recent ones: a resumed node's older
        samples say nothing of now), any GPU is at or above the cluster's threshold or the
        train step advanced past the step seen before."""
        threshold = DEFAULT_ACTIVE_PCT if node.active_below is None else node.active_below
        recent = [s for s in samples if float(s["at"]) >= after]
        busy = any(u >= threshold for s in recent for u in gpu_utilisations(s))
        steps = [step for s in samples if (step := train_step(s)) is not None]
        recent_steps = [step for s in recent if (step := train_step(s)) is not None]
        before = track.last_step if track.last_step is not None else min(steps, default=None)
        advanced = bool(recent_steps) and before is not None and max(recent_steps) > before
        if steps:
            track.last_step = max(steps)
        return busy or advanced

    def _fold(
        self, node: LiveNode, track: _Track, samples: Sequence[Mapping[str, Any]]
    ) -> list[PointRow]:
        """Add ``samples`` (newer than ``last_at``, oldest first) to the open buckets, opening
        the next ones as they pass a boundary; the rows of every bucket touched."""
        touched: dict[tuple[int, float], Bucket] = {}
        for sample in samples:
            at = float(sample["at"])
            for resolution in RESOLUTIONS:
                start = bucket_start(at, resolution)
                current = track.open.get(resolution)
                if current is None or current[0] != start:
                    current = track.open[resolution] = (start, Bucket())
                current[1].add(sample)
                touched[(resolution, start)] = current[1]
        track.last_at = float(samples[-1]["at"])
        return [node.labels.point(resolution, start, bucket.samples, bucket.record())
                for (resolution, start), bucket in sorted(touched.items())]  # fmt: skip


def _first_since(stored: float | None, earliest: float) -> float:
    """Where a node is first asked from: the start of its newest stored 60 s bucket
    (``stored``) or, when there is none or it is older, of the 60 s bucket holding the
    first-pull window's start (``earliest``): whole buckets, none of them stored yet."""
    window = bucket_start(earliest, RESOLUTIONS[-1])
    return max(window, window if stored is None else stored) - _EDGE_S


def _new_samples(answer: Mapping[str, Any], after: float | None) -> list[Mapping[str, Any]]:
    samples = answer.get("samples")
    if not isinstance(samples, list):
        raise ValueError("the agent's /v1/metrics answer has no sample list")
    fresh = [s for s in samples if isinstance(s, Mapping) and isinstance(s.get("at"), int | float)]
    if after is not None:
        fresh = [s for s in fresh if float(s["at"]) > after]
    return sorted(fresh, key=lambda s: float(s["at"]))


def _live_node(node: Node, cluster: Cluster) -> LiveNode:
    labels = NodeLabels(
        cluster_id=cluster.id,
        cluster=cluster.name,
        job_id=cluster.job_id,
        node_rank=node.node_rank,
        provider=cluster.provider,
        region=cluster.region or "",
        instance_type=cluster.instance_type or "",
        spot=bool(cluster.spot),
    )
    ref = NodeRef(node.provider, node.instance_id, node.agent_url or "")
    return LiveNode(ref, labels, cluster.autostop_gpu_below)


def _name(node: LiveNode) -> str:
    return f"{node.labels.cluster}/{node.labels.node_rank} ({node.ref.instance_id})"


class RelayThread(PeriodicThread):
    """Runs :meth:`Relay.run_pass` every ``interval_s`` on a thread of its own; the relay's
    agent clients are closed once it stopped."""

    def __init__(self, relay: Relay) -> None:
        self.relay = relay
        super().__init__("telemetry-relay", relay.run_pass, lambda: relay.settings.interval_s,
                         on_stopped=relay.close)  # fmt: skip


@dataclass(frozen=True)
class HttpMetrics:
    """The relay's port over the server's agent connector (cached clients, node tokens)."""

    agents: HttpAgents

    def metrics(self, node: NodeRef, since: float | None) -> Mapping[str, Any]:
        return self.agents.agent(node).metrics(since)
