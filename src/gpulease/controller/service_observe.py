"""What the services loop sees of a service each pass: its replica clusters (by ``service_id``)
with their nodes, the readiness probes it runs on them, and the autoscaler's decision over the
load balancer's samples — turned into the pure :class:`~gpulease.controller.service_rules
.ServiceSnap`.

Owns :class:`ReplicaHealth` (the loop's memory of one replica between passes: probe results,
whether it is retiring), :class:`HttpProbe` (``GET readiness_probe.path``, or ``POST`` with
``post_data``, within its timeout; 2xx is ready), :func:`replica_url` (through
:mod:`~gpulease.controller.service_address`), :func:`preempted_at` (a replica's preemption
notice, from its nodes or their history) and :class:`Scaler` (the load samples of a service and
the call of ``serve.autoscale.decide``). Moves no states.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.controller.document import LaunchDocument
from gpulease.controller.service_address import ReplicaAddresses
from gpulease.controller.service_document import ServiceDocument, ServiceSettings
from gpulease.controller.service_rules import GONE, ReplicaSnap, ScaleInput
from gpulease.errors import GpuleaseError
from gpulease.providers.base import Provider, SupportsSpotMarket
from gpulease.serve.autoscale import AutoscalePolicy, LoadSample, ReplicaView, ScaleMemory, decide
from gpulease.state import Cluster, ClusterStatus, Node, NodeState, StatusChange

if TYPE_CHECKING:
    from gpulease.serve.proxy import LoadStats

log = logging.getLogger("gpulease.controller.services")

_C = ClusterStatus
PROBE_EVERY_S = 5.0  # a ready replica is probed this often
PROBE_EARLY_EVERY_S = 0.5  # one not ready yet, this often (so it joins quickly)
SAMPLES_KEPT = 4096
MOVED_ON = frozenset({NodeState.TERMINATING, NodeState.TERMINATED, NodeState.FAILED})


@dataclass
class ReplicaHealth:
    """The loop's memory of one replica (lost with the server process: a restarted server
    probes again, and finds too many replicas to drain again if it was scaling down)."""

    ready: bool = False
    ever_ready: bool = False
    probe_failures: int = 0
    probed_at: float | None = None
    retiring: str | None = None
    drain_started_at: float | None = None
    failed: bool = False  # retired for failing
    preempted_at: float | None = None  # when a node of it got its notice or was preempted


class HttpProbe:
    """The readiness probe of one replica URL."""

    def __init__(self) -> None:
        self._http = httpx.Client(follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __call__(self, url: str, settings: ServiceSettings) -> bool:
        target = url.rstrip("/") + "/" + settings.probe_path.lstrip("/")
        try:
            if settings.probe_post_data is not None:
                answer = self._http.post(target, json=settings.probe_post_data,
                                         timeout=settings.probe_timeout_s)  # fmt: skip
            else:
                answer = self._http.get(target, timeout=settings.probe_timeout_s)
        except httpx.HTTPError:
            return False
        return 200 <= answer.status_code < 300


def replica_port(cluster: Cluster) -> int | None:
    """The ``$PORT`` the replica's launch document gave it."""
    port = LaunchDocument.from_json(cluster.task).run.envs.get("PORT")
    return int(port) if port and port.isdigit() else None


def replica_url(cluster: Cluster, nodes: Sequence[Node], addresses: ReplicaAddresses) -> str | None:
    """Node 0's address and the replica's ``$PORT`` once node 0 is up
    (:class:`~gpulease.controller.service_address.ReplicaAddresses`)."""
    port = replica_port(cluster)
    for node in nodes:
        if node.node_rank == 0 and node.state is NodeState.READY and node.agent_url and port:
            return addresses.url(node.provider, node.instance_id, node.agent_url, port)
    return None


def replica_index(name: str) -> int:
    """The replica's number: the last ``-N`` of its cluster name."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def replica_snap(
    cluster: Cluster,
    nodes: Sequence[Node],
    health: ReplicaHealth,
    *,
    url: str | None,
    running_since: float | None,
    drained: bool,
) -> ReplicaSnap:
    lost = any(n.state is NodeState.LOST for n in nodes)
    return ReplicaSnap(
        id=cluster.id,
        index=replica_index(cluster.name),
        version=cluster.replica_version or 1,
        status=cluster.status,
        spot=cluster.pricing == "spot",
        url=url,
        running_since=running_since,
        node_lost=lost,
        preempted_at=health.preempted_at,
        ready=health.ready,
        probe_failures=health.probe_failures,
        retiring=health.retiring,
        drain_started_at=health.drain_started_at,
        drained=drained,
    )


def preempted_at(session: Session, cluster: Cluster, nodes: Sequence[Node]) -> float | None:
    """When the replica got its preemption notice or was preempted: a node PREEMPTED now; once
    a node has moved on (the cluster loop terminates a node whose instance is gone), the nodes'
    history; or, for a spot replica, its cluster FAILED for the infrastructure (its task
    preempted by the agent's own notice, its instance gone) — whatever the cluster ended with."""
    marks = [n.status_changed_at for n in nodes if n.state is NodeState.PREEMPTED]
    if not marks and any(n.state in MOVED_ON for n in nodes):
        marks = preempted_history(session, nodes)
    if not marks and cluster.spot and cluster.status is _C.FAILED and cluster.failure == "infra":
        marks = [cluster.status_changed_at]
    return min(marks) if marks else None


def preempted_history(session: Session, nodes: Sequence[Node]) -> list[float]:
    """When the nodes entered PREEMPTED, from their status history."""
    stmt = select(StatusChange.at).where(
        StatusChange.entity_kind == "node",
        StatusChange.entity_id.in_([n.id for n in nodes]),
        StatusChange.to_status == NodeState.PREEMPTED.value,
    )
    return list(session.scalars(stmt))


def held_until(memory: Mapping[str, Any]) -> float | None:
    """The spot hold kept in a service's autoscale memory (``spot_unavailable_until``)."""
    held = memory.get("spot_unavailable_until")
    return float(held) if isinstance(held, int | float) else None


def probe_replica(
    probe: HttpProbe, snap: ReplicaSnap, health: ReplicaHealth, settings: ServiceSettings,
    now: float,
) -> None:  # fmt: skip
    """Probe a RUNNING replica when due; count failures only after the initial delay."""
    if snap.status is not _C.RUNNING or snap.url is None or snap.retiring is not None:
        health.ready = False
        return
    every = PROBE_EVERY_S if health.ready else PROBE_EARLY_EVERY_S
    if health.probed_at is not None and now - health.probed_at < every:
        return
    health.probed_at = now
    ok = probe(snap.url, settings)
    since = snap.running_since if snap.running_since is not None else now
    if ok:
        health.ready = health.ever_ready = True
        health.probe_failures = 0
    else:
        health.ready = False
        if now - since >= settings.probe_initial_delay_s:
            health.probe_failures += 1


def _state(r: ReplicaSnap) -> Literal["provisioning", "starting", "ready", "draining", "failed",
                                        "preempted"]:  # fmt: skip
    if r.node_lost or r.preempted_at is not None:
        return "preempted"
    if r.retiring is not None:
        return "draining"
    if r.status in (_C.PENDING, _C.PROVISIONING):
        return "provisioning"
    if r.status is _C.RUNNING:
        return "ready" if r.ready else "starting"
    if r.status in (_C.SETTING_UP, _C.STARTING):
        return "starting"
    return "failed"


class Scaler:
    """The autoscaler's side of one service: the load samples (one per pass, from the load
    balancer's stats) and the call of ``serve.autoscale.decide``."""

    def __init__(self) -> None:
        self.samples: deque[LoadSample] = deque(maxlen=SAMPLES_KEPT)

    def observe(self, stats: LoadStats | None, now: float) -> None:
        if stats is not None:
            self.samples.append(stats.sample(now))

    def decide(
        self,
        now: float,
        doc: ServiceDocument,
        *,
        desired: int,
        replicas: Sequence[ReplicaSnap],
        memory: dict[str, Any],
        spot_available: bool,
    ) -> ScaleInput | None:
        """None without an ``autoscale:`` section (the count stays at ``replicas.min``)."""
        if doc.policy is None:
            return None
        policy = AutoscalePolicy(**doc.policy)
        views = [
            ReplicaView(id=r.id, state=_state(r), spot=r.spot,
                        since=r.running_since if r.running_since is not None else now)
            for r in replicas
            if r.status not in GONE and r.retiring is None  # both versions while rolling: the
            # load is spread over every ready replica, old or new
        ]  # fmt: skip
        before = ScaleMemory.from_dict(memory)
        got = decide(now, list(self.samples), views, policy, before,
                     spot_available=spot_available)  # fmt: skip
        after = got.memory.as_dict()
        wanted = got.memory.target  # the replicas wanted (replacements are the loop's own)
        return ScaleInput(
            desired=int(wanted) if wanted is not None else desired,
            reason=str(got.reason),
            remove=tuple(got.remove),
            memory=after if after != memory else None,
        )


def spot_available(providers: Mapping[str, Provider], doc: ServiceDocument) -> bool:
    """Whether a spot replica can be had now: the service has spot targets and the first one's
    provider does not say otherwise."""
    if not doc.spot:
        return False
    target = doc.spot[0]
    provider = providers.get(target.provider)
    if isinstance(provider, SupportsSpotMarket):
        try:
            known = provider.spot_available(target.region, target.zone, target.num_nodes)
        except GpuleaseError:
            known = None
        if known is not None:
            return known
    return True
