"""SSH tunnels from this server to each VM's agent (which listens on the VM's 127.0.0.1 only).

A :class:`Tunnels` object owns one ``ssh -N -L <local>:127.0.0.1:<agent port> user@host``
subprocess per instance (host keys accepted on first use into ``<home>/aws/known_hosts``), says
the agent URL ``http://127.0.0.1:<local>`` once the local port accepts connections, restarts a
tunnel whose ssh exited, and closes them all in :meth:`close`. Moves no states.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ssh_command(
    *, host: str, user: str, key: Path, known_hosts: Path, local_port: int, agent_port: int,
    ssh: str = "ssh",
) -> list[str]:  # fmt: skip
    return [
        ssh, "-N", "-L", f"{local_port}:127.0.0.1:{agent_port}",
        "-i", str(key),
        "-o", "StrictHostKeyChecking=accept-new",
        "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "ExitOnForwardFailure=yes",
        "-o", "ServerAliveInterval=15",
        "-o", "BatchMode=yes",
        f"{user}@{host}",
    ]  # fmt: skip


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class _Tunnel:
    host: str
    port: int
    proc: subprocess.Popen[bytes]


class Tunnels:
    def __init__(self, known_hosts: Path, *, user: str, agent_port: int, ssh: str = "ssh"):
        self.known_hosts = known_hosts
        self.user = user
        self.agent_port = agent_port
        self.ssh = ssh
        self._tunnels: dict[str, _Tunnel] = {}
        self._lock = threading.Lock()

    def agent_url(self, instance_id: str, host: str, key: Path) -> str | None:
        """The agent URL through this instance's tunnel (opened on demand); None until up."""
        with self._lock:
            tunnel = self._tunnels.get(instance_id)
            if tunnel and (tunnel.proc.poll() is not None or tunnel.host != host):
                self._stop(self._tunnels.pop(instance_id))
                tunnel = None
            if tunnel is None:
                tunnel = self._tunnels[instance_id] = self._open(host, key)
        return f"http://127.0.0.1:{tunnel.port}" if _accepts(tunnel.port) else None

    def _open(self, host: str, key: Path) -> _Tunnel:
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        port = free_port()
        command = ssh_command(
            host=host, user=self.user, key=key, known_hosts=self.known_hosts,
            local_port=port, agent_port=self.agent_port, ssh=self.ssh,
        )  # fmt: skip
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        return _Tunnel(host, port, proc)

    def drop(self, instance_id: str) -> None:
        with self._lock:
            tunnel = self._tunnels.pop(instance_id, None)
        if tunnel:
            self._stop(tunnel)

    def open_ids(self) -> list[str]:
        with self._lock:
            return list(self._tunnels)

    @staticmethod
    def _stop(tunnel: _Tunnel) -> None:
        if tunnel.proc.poll() is None:
            tunnel.proc.terminate()
            try:
                tunnel.proc.wait(5)
            except subprocess.TimeoutExpired:
                tunnel.proc.kill()
                tunnel.proc.wait(5)

    def close(self) -> None:
        with self._lock:
            tunnels, self._tunnels = list(self._tunnels.values()), {}
        for tunnel in tunnels:
            self._stop(tunnel)
