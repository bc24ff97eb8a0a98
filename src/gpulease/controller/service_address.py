"""Where the load balancer reaches a replica: ``http://<address>:<$PORT>`` of its node 0.

- a node whose agent answers on a routable address (Slurm nodes, VMs reached directly): that
  address and the replica's port;
- a node on this host (local, sim; its agent on 127.0.0.1): 127.0.0.1 and its port;
- a cloud VM whose agent is reached through the SSH tunnel the server holds (its agent URL is on
  127.0.0.1 here): a second forward over SSH to the replica's port on the VM
  (:class:`~gpulease.providers.aws.tunnel.Tunnels`, one per replica port), so no port is opened
  to the internet; the URL comes once a request through it got an answer.

Owns :class:`ReplicaAddresses` (the forwards, dropped with their replica, closed with the loop).
Moves no states.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from urllib.parse import urlsplit

from gpulease.errors import GpuleaseError
from gpulease.providers.aws.tunnel import Tunnels
from gpulease.providers.base import Provider, SupportsSsh

log = logging.getLogger("gpulease.controller.services")

SAME_HOST_PROVIDERS = frozenset({"local", "sim"})  # their nodes are processes on this host


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class ReplicaAddresses:
    def __init__(self, providers: Mapping[str, Provider]) -> None:
        self.providers = providers
        self._forwards: dict[int, Tunnels] = {}  # by replica port on the VM

    def url(self, provider: str, instance_id: str, agent_url: str, port: int) -> str | None:
        """The replica's URL, None while it cannot be reached (its forward not answering)."""
        host = urlsplit(agent_url).hostname
        if not host:
            return None
        if not _loopback(host) or provider in SAME_HOST_PROVIDERS:
            return f"http://{host}:{port}"
        found = self.providers.get(provider)
        if not isinstance(found, SupportsSsh):
            return None
        try:
            target = found.ssh_target(instance_id)
        except GpuleaseError as exc:
            log.info("replica on %s: no SSH login yet: %s", instance_id, exc)
            return None
        forwards = self._forwards.setdefault(port, Tunnels(agent_port=port))
        return forwards.agent_url(instance_id, target)

    def drop(self, instance_id: str) -> None:
        """Close the forward to a replica that is gone."""
        for forwards in self._forwards.values():
            forwards.drop(instance_id)

    def close(self) -> None:
        for forwards in self._forwards.values():
            forwards.close()
        self._forwards.clear()
