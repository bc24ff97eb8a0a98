"""The services' endpoints on the server's host: one :class:`~gpulease.serve.proxy.LoadBalancer`
per live service, keyed by service id — started when the service is created (its port chosen
then, kept in ``services.endpoint_port``) or when the server starts (every service not DOWN, on
its kept port), fed by the services loop (``set_backends`` / ``drain``), stopped at DOWN and at
server stop. Implements :class:`gpulease.controller.service_loop.Endpoints`. Moves no states.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import Engine, select

from gpulease.errors import Retryable
from gpulease.state import Service, ServiceStatus, session_scope

if TYPE_CHECKING:  # loaded with the first endpoint: a server with no service needs no aiohttp
    from gpulease.serve.proxy import LoadBalancer, LoadStats

log = logging.getLogger("gpulease.server")


class EndpointUnavailable(Retryable):
    """A service's endpoint port could not be bound (taken by another process)."""


class Endpoints:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._lock = threading.Lock()
        self._balancers: dict[int, LoadBalancer] = {}
        self._ports: dict[int, int] = {}
        self._backends: dict[int, frozenset[int]] = {}  # what each balancer was given
        self._draining: dict[int, set[int]] = {}

    def open(self, service_id: int, port: int | None) -> int:
        """Serve service ``service_id`` on ``port`` (None or 0: a free one); idempotent."""
        with self._lock:
            found = self._balancers.get(service_id)
            if found is not None:
                return self._ports[service_id]
            from gpulease.serve.proxy import LoadBalancer

            balancer = LoadBalancer(self.host, port or 0)
            try:
                bound = int(balancer.start())
            except OSError as exc:
                raise EndpointUnavailable(
                    f"service {service_id}: endpoint port {port} cannot be bound: {exc}"
                ) from None
            self._balancers[service_id] = balancer
            self._ports[service_id] = bound
            log.info("service %d: endpoint on http://%s:%d", service_id, self.host, bound)
            return bound

    def open_ids(self) -> list[int]:
        """The services whose endpoint is open now."""
        with self._lock:
            return sorted(self._balancers)

    def url(self, port: int | None) -> str | None:
        return f"http://{self.host}:{port}" if port else None

    def _get(self, service_id: int) -> LoadBalancer | None:
        with self._lock:
            return self._balancers.get(service_id)

    def set_backends(self, service_id: int, backends: Sequence[tuple[int, str]]) -> None:
        balancer = self._get(service_id)
        if balancer is not None:
            from gpulease.serve.proxy import Backend

            balancer.set_backends([Backend(id=i, url=url) for i, url in backends])
            ids = frozenset(i for i, _ in backends)
            self._backends[service_id] = ids
            self._draining[service_id] = self._draining.get(service_id, set()) & ids

    def drain(self, service_id: int, replica_id: int) -> None:
        balancer = self._get(service_id)
        if balancer is not None:
            balancer.drain(replica_id)
            self._draining.setdefault(service_id, set()).add(replica_id)

    def replica_state(self, service_id: int, replica_id: int) -> str | None:
        """``ready`` (takes requests), ``draining`` or None (not behind the endpoint)."""
        if replica_id in self._draining.get(service_id, set()):
            return "draining"
        return "ready" if replica_id in self._backends.get(service_id, frozenset()) else None

    def drained(self, service_id: int, replica_id: int) -> bool:
        balancer = self._get(service_id)
        return balancer is None or balancer.drained(replica_id)

    def stats(self, service_id: int) -> LoadStats | None:
        balancer = self._get(service_id)
        return balancer.stats() if balancer is not None else None

    def close(self, service_id: int) -> None:
        with self._lock:
            balancer = self._balancers.pop(service_id, None)
            self._ports.pop(service_id, None)
            self._backends.pop(service_id, None)
            self._draining.pop(service_id, None)
        if balancer is not None:
            balancer.stop()
            log.info("service %d: endpoint closed", service_id)

    def open_live(self, engine: Engine) -> None:
        """At server start: the endpoint of every service not DOWN, on its kept port."""
        with session_scope(engine) as session:
            live = Service.status != ServiceStatus.DOWN
            rows = list(session.execute(select(Service.id, Service.endpoint_port).where(live)))
        for service_id, port in rows:
            try:
                self.open(service_id, port)
            except EndpointUnavailable as exc:
                log.warning("%s", exc)

    def close_all(self) -> None:
        with self._lock:
            ids = list(self._balancers)
        for service_id in ids:
            self.close(service_id)
