"""SSH tunnels from this server to each VM's agent (which listens on the VM's 127.0.0.1 only).

A :class:`Tunnels` object owns one ``ssh -N -L <local>:127.0.0.1:<agent port> user@host``
subprocess per instance (options from :func:`gpulease.providers.ssh.ssh_options`: key only, host
keys pinned per instance id in ``<home>/aws/known_hosts``), says the agent URL
``http://127.0.0.1:<local>`` once an HTTP request through the tunnel got an answer from the
agent (any status: the probe carries no token), restarts a tunnel whose ssh exited, and closes
them all in :meth:`close`. The tunnels run in sessions of their own, so a server killed without
a clean stop leaves them; :func:`reap_leftovers` stops those of a home's ``known_hosts`` (the
next server does, at start). Moves no states.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpulease.providers.ssh import SshTarget, ssh_options

log = logging.getLogger("gpulease.providers.aws")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ssh_command(
    target: SshTarget, *, local_port: int, agent_port: int, ssh: str = "ssh"
) -> list[str]:
    return [
        ssh, "-N", "-L", f"{local_port}:127.0.0.1:{agent_port}",
        *ssh_options(target),
        "-o", "ExitOnForwardFailure=yes",
        target.destination,
    ]  # fmt: skip


def reap_leftovers(known_hosts: Path) -> int:
    """Stop the ``ssh -N`` forwards pinned to ``known_hosts`` that are not this process's own
    (a previous server's, killed without stopping them): SIGTERM, SIGKILL after 3 s; how many."""
    marker = f"UserKnownHostsFile={known_hosts}"
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["ppid", "cmdline"]):
        command = proc.info["cmdline"] or []
        if proc.info["ppid"] != me and "-N" in command and marker in command:
            try:
                proc.terminate()
                found.append(proc)
            except psutil.Error:  # gone meanwhile, or not ours to signal
                continue
    _, alive = psutil.wait_procs(found, timeout=3)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    if found:
        log.warning("stopped %d SSH forward(s) a previous server left (%s)", len(found), marker)
    return len(found)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _agent_answers(port: int) -> bool:
    """True when an HTTP request through the tunnel gets an answer (the agent is there)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", "/v1/health")
        conn.getresponse().read()
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


@dataclass
class _Tunnel:
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    answered: bool = False


class Tunnels:
    def __init__(self, *, agent_port: int, ssh: str = "ssh"):
        self.agent_port = agent_port
        self.ssh = ssh
        self._tunnels: dict[str, _Tunnel] = {}
        self._lock = threading.Lock()

    def agent_url(self, instance_id: str, target: SshTarget) -> str | None:
        """The agent URL through this instance's tunnel (opened on demand); None until the
        agent answered through it."""
        with self._lock:
            tunnel = self._tunnels.get(instance_id)
            if tunnel and (tunnel.proc.poll() is not None or tunnel.host != target.host):
                self._stop(self._tunnels.pop(instance_id))
                tunnel = None
            if tunnel is None:
                tunnel = self._tunnels[instance_id] = self._open(target)
        if tunnel.answered:
            up = _accepts(tunnel.port)
        else:
            up = tunnel.answered = _agent_answers(tunnel.port)
        return f"http://127.0.0.1:{tunnel.port}" if up else None

    def _open(self, target: SshTarget) -> _Tunnel:
        target.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        port = free_port()
        command = ssh_command(target, local_port=port, agent_port=self.agent_port, ssh=self.ssh)
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        return _Tunnel(target.host, port, proc)

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
