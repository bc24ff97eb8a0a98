"""Finding, starting and stopping the local gpulease server, from the client side.

The server writes ``<home>/server.json`` (``pid``, ``port``, ``url``) and keeps its API token in
``<home>/server.token`` (0600). :func:`connect` reads both and checks ``/v1/health``; when no
server answers it starts one — ``python -m gpulease.server run``, detached (its own session,
output to ``<home>/server.log``) — waits for its health with bounded, jittered backoff, and calls
``on_start(pid, port)`` once. This module spawns the server as a program; it imports nothing of
it. Moves no states.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpulease import config
from gpulease.backoff import backoff_delay
from gpulease.client.errors import ServerUnavailable
from gpulease.client.http import Client
from gpulease.errors import GpuleaseError

INFO_FILE = "server.json"
TOKEN_FILE = "server.token"
LOG_FILE = "server.log"
START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class ServerInfo:
    pid: int
    port: int
    url: str


def read_info(home: Path | None = None) -> ServerInfo | None:
    path = (home or config.home()) / INFO_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ServerInfo(int(data["pid"]), int(data["port"]), str(data["url"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _token(home: Path) -> str | None:
    try:
        return (home / TOKEN_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def running(home: Path | None = None) -> tuple[Client, ServerInfo] | None:
    """A client for the server that answers for this home, or None."""
    home = home or config.home()
    info, token = read_info(home), _token(home)
    if info is None or token is None:
        return None
    client = Client(info.url, token)
    try:
        client.health()
    except GpuleaseError:
        client.close()
        return None
    return client, info


def spawn(home: Path) -> int:
    """Start a detached server process; its pid."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(home / LOG_FILE, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpulease.server", "run"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "GPULEASE_HOME": str(home)},
        )
    return proc.pid


def connect(
    *,
    autostart: bool = True,
    on_start: Callable[[int, int], None] | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> Client:
    """A client for this home's server, starting one when none answers (``autostart``)."""
    home = config.home()
    found = running(home)
    if found is not None:
        return found[0]
    if not autostart:
        raise ServerUnavailable("no gpulease server is running (start one: gpulease server run)")
    pid = spawn(home)
    client, info = _wait_started(home, pid, timeout_s)
    if on_start is not None and info.pid == pid:
        on_start(info.pid, info.port)
    return client


def _wait_started(home: Path, pid: int, timeout_s: float) -> tuple[Client, ServerInfo]:
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while time.monotonic() < deadline:
        found = running(home)
        if found is not None:
            return found
        attempt += 1
        time.sleep(backoff_delay(attempt, base=0.05, cap=0.5))
    raise ServerUnavailable(
        f"the gpulease server (pid {pid}) did not answer within {timeout_s:.0f} s; "
        f"see {home / LOG_FILE}"
    )


def stop(timeout_s: float = 30.0) -> ServerInfo | None:
    """Ask the running server to exit and wait until it has; the server it was, or None."""
    found = running()
    if found is None:
        return None
    client, info = found
    with client:
        client.shutdown()
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while time.monotonic() < deadline and _alive(info.pid):
        attempt += 1
        time.sleep(backoff_delay(attempt, base=0.05, cap=0.5))
    return info


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, an exited child not yet reaped, does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
