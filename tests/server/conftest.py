"""Fixtures of the server tests: a REAL server process (``python -m gpulease.server run``) on a
private ``GPULEASE_HOME``, real SQLite, real agents through the real LocalProvider, and the SDK
client. Teardown stops the server and terminates every node the home's local provider ever
started, then checks the process table."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import Engine

from gpulease.backoff import backoff_delay
from gpulease.client import Client
from gpulease.client.server import read_info
from gpulease.providers.base import TAG_CLUSTER, Instance, InstanceState
from gpulease.providers.local import LocalProvider
from gpulease.server.endpoints import Endpoints
from gpulease.state import make_engine
from tests.dbfixtures import sqlite_template
from tests.providers.procs import node_pids
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


@pytest.fixture
def endpoints() -> Iterator[Endpoints]:
    """Services' load balancers, every one closed after the test."""
    made = Endpoints()
    yield made
    made.close_all()


@pytest.fixture
def engine(sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:
    """A migrated SQLite state DB of the test's own (the API tests run the app in process)."""
    path = tmp_path / "state.db"
    shutil.copyfile(sqlite_template, path)
    eng = make_engine(f"sqlite:///{path}")
    yield eng
    eng.dispose()


class ServerProcess:
    """One server process for ``home``; ``start`` again after a kill resumes from the DB."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: Client | None = None

    def start(self, **env: str) -> ServerProcess:
        full = {**os.environ, "GPULEASE_HOME": str(self.home), **env}
        full.pop("GPULEASE_FAILPOINT", None) if "GPULEASE_FAILPOINT" not in env else None
        log = open(self.home / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        self.home.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpulease.server", "run"],
            cwd=ROOT, env=full, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        pid = self.proc.pid
        info = wait_until(lambda: (i := read_info(self.home)) and i.pid == pid and i, 30, "server")
        token = (self.home / "server.token").read_text().strip()
        self.client = Client(info.url, token)
        wait_until(self.client.health, 30, "health")
        return self

    @property
    def api(self) -> Client:
        assert self.client is not None
        return self.client

    def wait_exit(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.client is not None:
            self.client.close()
            self.client = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.client is not None:
            self.client.close()
            self.client = None

    # ---- what the tests look at -------------------------------------------------------------

    def wait_status(self, name: str, statuses: set[str], timeout: float = 90.0) -> dict[str, Any]:
        return wait_until(
            lambda: (v := self.api.cluster(name))["status"] in statuses and v,
            timeout,
            f"{name} to be {statuses}",
        )

    def all_logs(self, name: str, rank: int = 0) -> str:
        out, offset = b"", 0
        while True:
            chunk = self.api.logs(name, offset, rank=rank)
            out += chunk.data
            offset = chunk.next_offset
            if not chunk.data:
                return out.decode()

    def provider(self) -> LocalProvider:
        return LocalProvider(self.home / "local", kill_grace_s=0.5)

    def instances(self, cluster: str) -> list[Instance]:
        found = self.provider().list_instances({TAG_CLUSTER: cluster})
        return [i for i in found if i.state is not InstanceState.TERMINATED]

    def node_processes(self) -> list[int]:
        provider = self.provider()
        ids = [p.stem for p in (provider.root / "instances").glob("*.json")]
        return node_pids(provider, ids) if ids else []


def task_body(run: str, *, name: str, nodes: int = 1, **extra: Any) -> dict[str, Any]:
    return {"name": name, "num_nodes": nodes, "resources": {"providers": ["local"]},
            "run": run, **extra}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def server(home: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(home)
    yield proc
    proc.stop()
    provider = proc.provider()
    live = [i.id for i in provider.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        provider.terminate(live)
        wait_until(lambda: not proc.node_processes() or None, 20, "test nodes to die")
        provider.list_instances({})
