"""What the services loop needs besides the DB and the providers: the services' endpoints
(:class:`Endpoints`, one load balancer per service by id; the server implements it with
``serve.proxy.LoadBalancer`` in :mod:`gpulease.server.endpoints`), and :func:`free_port` (a
replica's ``$PORT`` on providers whose nodes run on this host). Moves no states.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gpulease.serve.proxy import LoadStats


class Endpoints(Protocol):
    """The services' load balancers, by service id (the server's ``server.endpoints``)."""

    def open(self, service_id: int, port: int | None) -> int:
        """Serve the endpoint (idempotent); the port it listens on."""
        ...

    def set_backends(self, service_id: int, backends: Sequence[tuple[int, str]]) -> None: ...

    def drain(self, service_id: int, replica_id: int) -> None: ...

    def drained(self, service_id: int, replica_id: int) -> bool: ...

    def stats(self, service_id: int) -> LoadStats | None: ...

    def close(self, service_id: int) -> None: ...


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
