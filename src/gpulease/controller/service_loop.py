"""The services loop: which services are due, a snapshot of each (its row, its replica clusters
with their nodes, readiness probes, the load balancer's stats and the autoscaler's decision), one
step of :func:`~gpulease.controller.service_rules.decide_service`, carried out under the
service's claim (kind ``service``) on the shared :mod:`~gpulease.controller.skeleton`.

Replicas are ordinary clusters (``<service>-<id>-<n>``, ``service_id`` and ``replica_version``
set), each with the replica's ``$PORT`` in its envs — a free port of this host for providers
whose nodes run here (local, sim), the service's ``port`` elsewhere; the cluster loop provisions,
runs and terminates them (it confirms termination). The endpoint (one load balancer per service)
is behind :class:`~gpulease.controller.service_ports.Endpoints`, which the server implements
with ``serve.proxy.LoadBalancer``.

A replica's preemption notice (its node PREEMPTED by :mod:`~gpulease.controller.job_events`;
the node now, or its history) is the replica's ``preempted_at``: drained, replaced, spot held.

States moved: service statuses (through ``set_status``, guarded by the claim), replica clusters
→ TERMINATING; ``services.desired_replicas``, ``autoscale`` and ``decisions``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import Engine, or_, select, update
from sqlalchemy.orm import Session

from gpulease.clock import Clock
from gpulease.controller.document import LaunchDocument
from gpulease.controller.service_address import SAME_HOST_PROVIDERS, ReplicaAddresses
from gpulease.controller.service_document import ServiceDocument
from gpulease.controller.service_observe import (
    HttpProbe,
    ReplicaHealth,
    Scaler,
    held_until,
    preempted_at,
    probe_replica,
    replica_index,
    replica_snap,
    replica_url,
    spot_available,
)
from gpulease.controller.service_ports import Endpoints, free_port
from gpulease.controller.service_rules import (
    CloseEndpoint,
    HoldSpot,
    Launch,
    RecordScale,
    ReplicaSnap,
    Retire,
    ServiceAction,
    ServiceSnap,
    SetBackends,
    SetService,
    Terminate,
    decide_service,
)
from gpulease.controller.skeleton import (
    ClaimedLoop,
    LoopSettings,
    StepOutcome,
    held_session,
    worker_prefix,
)
from gpulease.providers.base import Provider
from gpulease.state import (
    Claim,
    Cluster,
    ClusterExists,
    ClusterStatus,
    InvalidTransition,
    LostRace,
    Node,
    Service,
    ServiceStatus,
    create_cluster,
    list_nodes,
    session_scope,
    set_status,
)
from gpulease.state.claims import Claimable
from gpulease.wire import SERVICE_VARIABLE

log = logging.getLogger("gpulease.controller.services")

ACTOR = "services"
MAX_DECISIONS = 200
PROBE_THREADS = 8  # a service's readiness probes run at once, so one slow replica holds no other
_C = ClusterStatus


class ServiceReconciler(ClaimedLoop[ServiceSnap, ServiceAction]):
    """The services loop: an :class:`~gpulease.controller.skeleton.EntityLoop` over service
    rows, driven by its :class:`~gpulease.controller.skeleton.Skeleton` (claims on
    ``services``)."""

    kind = "service"
    model: Claimable = Service

    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        endpoints: Endpoints,
        *,
        clock: Clock,
        owner: str,
        settings: LoopSettings | None = None,
        probe: HttpProbe | None = None,
    ) -> None:
        super().__init__(engine, clock=clock, owner=owner, settings=settings)
        self.providers = providers
        self.endpoints = endpoints
        self.probe = probe or HttpProbe()
        self._probes = ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="probe")
        self.addresses = ReplicaAddresses(providers)  # SSH forwards to cloud replicas
        self.health: dict[int, ReplicaHealth] = {}  # by replica cluster id
        self.scalers: dict[int, Scaler] = {}  # by service id
        self.backends: dict[int, frozenset[int]] = {}  # what each load balancer has now
        self.failures: dict[int, tuple[int, int]] = {}  # service id → (version, in a row)
        self._urls: dict[int, str] = {}

    def close(self) -> None:
        self._probes.shutdown(wait=True)
        self.probe.close()
        self.addresses.close()

    def due(self) -> list[int]:
        with session_scope(self.engine) as session:
            stmt = select(Service.id).where(Service.status != ServiceStatus.DOWN)
            return sorted(session.scalars(stmt))

    def release_stale_claims(self) -> int:
        """Clear the service claims a previous server process on this host left behind."""
        prefix = worker_prefix(self.owner)
        stmt = (
            update(Service)
            .where(Service.lock_worker.startswith(prefix, autoescape=True))
            .where(Service.lock_worker != self.worker)
            .values(lock_worker=None, lock_token=None, lock_expires_at=None)
        )
        with session_scope(self.engine) as session:
            return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]

    # ---- snapshot ---------------------------------------------------------------------------

    def snapshot(self, service_id: int, retry_at: float | None = None) -> ServiceSnap | None:
        now = self.clock.now()
        with session_scope(self.engine) as session:
            row = session.get(Service, service_id)
            if row is None:
                return None
            doc = ServiceDocument.from_json(row.task)
            replicas = self._replicas(session, service_id)
            status, version, desired = row.status, row.version, row.desired_replicas
            memory, name, port = dict(row.autoscale or {}), row.name, row.endpoint_port
        if status is not ServiceStatus.SHUTTING_DOWN:
            self._open_endpoint(service_id, port)
        healths = [self._health(r.id) for r in replicas]  # probed at once, on the pool
        list(self._probes.map(lambda r, h: probe_replica(self.probe, r, h, doc.settings, now),
                              replicas, healths))  # fmt: skip
        replicas = tuple(replace(r, ready=self._health(r.id).ready) for r in replicas)
        if any(r.ready for r in replicas):
            self.failures.pop(service_id, None)  # a replica is ready: the failures in a row end
        scaler = self.scalers.setdefault(service_id, Scaler())
        scaler.observe(self.endpoints.stats(service_id), now)
        spot_ok = spot_available(self.providers, doc)  # the provider's word; the hold is decide's
        held = held_until(memory)
        scale = None
        if status not in (ServiceStatus.SHUTTING_DOWN, ServiceStatus.DOWN):
            # the provider's word: the autoscaler reads the hold from its memory (passing False
            # for the hold would make it extend the hold each pass)
            scale = scaler.decide(now, doc, desired=desired, replicas=replicas, memory=memory,
                                  spot_available=spot_ok)  # fmt: skip
            held = held_until(scale.memory) if scale and scale.memory else held
        seen = self.failures.get(service_id, (version, 0))
        return ServiceSnap(
            now=now, id=service_id, name=name, status=status, version=version, desired=desired,
            settings=doc.settings, replicas=replicas,
            backends=self.backends.get(service_id, frozenset()), scale=scale,
            spot_available=spot_ok, spot_held_until=held,
            failures_in_a_row=seen[1] if seen[0] == version else 0,
        )  # fmt: skip

    def _open_endpoint(self, service_id: int, port: int | None) -> None:
        """Serve the endpoint (idempotent); a service created without one (its port could not
        be bound then) keeps the port it gets now."""
        bound = self.endpoints.open(service_id, port)
        if bound != port:
            with session_scope(self.engine) as session:
                row = session.get(Service, service_id)
                if row is not None and row.endpoint_port is None:
                    row.endpoint_port = bound

    def _health(self, replica_id: int) -> ReplicaHealth:
        return self.health.setdefault(replica_id, ReplicaHealth())

    def _replicas(self, session: Session, service_id: int) -> tuple[ReplicaSnap, ...]:
        known = list(self.health)  # terminated ones are looked at once more, to forget them
        wanted = or_(Cluster.status != _C.TERMINATED, Cluster.id.in_(known))
        stmt = select(Cluster).where(Cluster.service_id == service_id, wanted)
        found = []
        for cluster in session.scalars(stmt.order_by(Cluster.id)):
            nodes = list_nodes(session, cluster.id)
            if cluster.status is _C.TERMINATED:
                self._forget(cluster.id, nodes)
                continue
            health = self._health(cluster.id)
            if health.preempted_at is None:
                health.preempted_at = preempted_at(session, cluster, nodes)
            running = cluster.status_changed_at if cluster.status is _C.RUNNING else None
            drained = False
            if health.retiring is not None:
                drained = self.endpoints.drained(service_id, cluster.id)
            url = None
            if cluster.status is _C.RUNNING and health.retiring is None:
                url = replica_url(cluster, nodes, self.addresses)
            url = url or self._urls.get(cluster.id)  # a draining one keeps its address
            snap = replica_snap(cluster, nodes, health, url=url, running_since=running,
                                drained=drained)  # fmt: skip
            if snap.url is not None:
                self._urls[cluster.id] = snap.url
            found.append(snap)
        return tuple(found)

    def _forget(self, replica_id: int, nodes: Sequence[Node]) -> None:
        self.health.pop(replica_id, None)
        self._urls.pop(replica_id, None)
        for node in nodes:
            self.addresses.drop(node.instance_id)

    # ---- decide and apply -------------------------------------------------------------------

    def decide(self, snap: ServiceSnap) -> list[ServiceAction]:
        return decide_service(snap)

    def apply(
        self, snap: ServiceSnap, actions: Sequence[ServiceAction], held: Claim
    ) -> StepOutcome:
        self._held = held
        changed = False
        try:
            for action in actions:
                if not self._apply(snap, action):
                    break
                changed = True
        finally:
            self._held = None
        return StepOutcome(progress=changed)

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        with held_session(self.engine, self._held) as session:
            yield session

    def _apply(self, snap: ServiceSnap, action: ServiceAction) -> bool:
        handlers: dict[type, Callable[[ServiceSnap, Any], bool]] = {
            SetService: self._set_service,
            RecordScale: self._record_scale,
            HoldSpot: self._hold_spot,
            Launch: self._launch,
            Retire: self._retire,
            Terminate: self._terminate,
            SetBackends: self._set_backends,
            CloseEndpoint: self._close_endpoint,
        }
        return handlers[type(action)](snap, action)

    def _retire(self, snap: ServiceSnap, a: Retire) -> bool:
        health = self._health(a.replica)
        health.retiring, health.drain_started_at = a.reason, snap.now
        health.failed = a.failed
        self.endpoints.drain(snap.id, a.replica)
        log.info("service %s: draining replica %d (%s)", snap.name, a.replica, a.reason)
        return True

    def _set_backends(self, snap: ServiceSnap, a: SetBackends) -> bool:
        pairs = [(i, self._urls[i]) for i in a.replicas if i in self._urls]
        self.endpoints.set_backends(snap.id, pairs)
        self.backends[snap.id] = frozenset(i for i, _ in pairs)
        return True

    def _close_endpoint(self, snap: ServiceSnap, _a: CloseEndpoint) -> bool:
        self.endpoints.close(snap.id)
        self.backends.pop(snap.id, None)
        self.scalers.pop(snap.id, None)
        return True

    def _set_service(self, snap: ServiceSnap, a: SetService) -> bool:
        with self._writing() as session:
            row = session.get(Service, snap.id)
            if row is None:
                return False
            try:
                moved = set_status(session, row, a.status, actor=ACTOR, reason=a.reason,
                                   now=snap.now, claim=self._held)  # fmt: skip
            except InvalidTransition as exc:
                log.info("service %s: %s", snap.name, exc)
                return False
            if moved and a.status is ServiceStatus.FAILED:
                row.last_error = a.reason
        if moved:
            log.info("service %s: %s (%s)", snap.name, a.status.value, a.reason)
        return moved

    def _record_scale(self, snap: ServiceSnap, a: RecordScale) -> bool:
        with self._writing() as session:
            row = session.get(Service, snap.id)
            if row is None:
                return False
            if a.memory is not None:
                row.autoscale = dict(a.memory)
            if a.changed:
                entry = {"at": snap.now, "from": row.desired_replicas, "to": a.desired,
                         "reason": a.reason}  # fmt: skip
                row.decisions = [*row.decisions, entry][-MAX_DECISIONS:]
                row.desired_replicas = a.desired
                log.info("service %s: %d → %d replicas (%s)", snap.name, entry["from"],
                         a.desired, a.reason)  # fmt: skip
        return True

    def _hold_spot(self, snap: ServiceSnap, a: HoldSpot) -> bool:
        with self._writing() as session:
            row = session.get(Service, snap.id)
            if row is None:
                return False
            memory = dict(row.autoscale or {})
            until = max(a.until, held_until(memory) or a.until)
            row.autoscale = {**memory, "spot_unavailable_until": until}
        log.info("service %s: spot held until %.0f (%s)", snap.name, until, a.reason)
        return True

    def _launch(self, snap: ServiceSnap, a: Launch) -> bool:
        with self._writing() as session:
            row = session.get(Service, snap.id)
            if row is None or row.version != snap.version:
                return False
            doc = ServiceDocument.from_json(row.task)
            targets = doc.targets(a.spot)
            if not targets:
                return False
            same_host = targets[0].provider in SAME_HOST_PROVIDERS
            port = free_port() if same_host else doc.settings.port
            envs = {**doc.run.envs, "PORT": str(port), SERVICE_VARIABLE: row.name}
            run = doc.run.model_copy(update={"envs": envs})
            launch = LaunchDocument(run=run, plans=targets, spec=doc.spec)
            index = 1 + max((replica_index(n) for n in _replica_names(session, snap.id)),
                            default=0)  # fmt: skip
            name = _replica_name(row.name, row.id, index)
            try:
                cluster, _intent = create_cluster(
                    session, name=name, target=targets[0], task=launch.to_json(),
                    owner=self.owner, actor=ACTOR, now=snap.now,
                )  # fmt: skip
            except ClusterExists as exc:
                raise LostRace(f"replica name taken: {exc}") from None
            cluster.service_id, cluster.replica_version = row.id, row.version
        log.info("service %s: replica %s on %s (%s; %s)", snap.name, name, targets[0].provider,
                 targets[0].pricing, a.reason)  # fmt: skip
        return True

    def _terminate(self, snap: ServiceSnap, a: Terminate) -> bool:
        health = self._health(a.replica)
        for _ in range(5):  # the cluster loop may move it meanwhile: retry on fresh data
            with self._writing() as session:
                cluster = session.get(Cluster, a.replica)
                if cluster is None or cluster.status in (_C.TERMINATING, _C.TERMINATED):
                    break
                if set_status(session, cluster, _C.TERMINATING, actor=ACTOR, reason=a.reason,
                              now=snap.now):  # fmt: skip
                    break
        else:
            return False
        if (a.failed or health.failed) and not health.ever_ready:
            version, count = self.failures.get(snap.id, (snap.version, 0))
            count = count + 1 if version == snap.version else 1
            self.failures[snap.id] = (snap.version, count)
        health.retiring = health.retiring or a.reason
        log.info("service %s: replica %d terminating (%s)", snap.name, a.replica, a.reason)
        return True


def _replica_names(session: Session, service_id: int) -> list[str]:
    return list(session.scalars(select(Cluster.name).where(Cluster.service_id == service_id)))


def _replica_name(service: str, service_id: int, index: int) -> str:
    suffix = f"-{service_id}-{index}"
    return service[: 63 - len(suffix)] + suffix
