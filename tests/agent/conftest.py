"""Agent tests run REAL agent processes (``python -m gpulease.agent serve``) on 127.0.0.1, each
with its own node directory and token, and talk to them through :class:`AgentClient`."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.agent.client import AgentClient
from gpulease.wire import NodeTask
from tests.waiting import wait_until

TERMINAL = {"SUCCEEDED", "FAILED", "PREEMPTED", "CANCELLED"}


class AgentProcess:
    """One agent process and a client for it; ``restart`` keeps the node dir and token."""

    def __init__(
        self,
        root: Path,
        env: dict[str, str] | None = None,
        rank: int = 0,
        args: tuple[str, ...] = (),
    ) -> None:
        """``args``: more ``serve`` arguments (``--venv-root DIR``)."""
        self.root = root
        self.node_dir = root / "node"
        self.token = secrets.token_urlsafe(24)
        self.token_file = root / "token"
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o600)
        self.log_path = root / "agent.log"
        self.env = {**os.environ, **(env or {})}
        self.rank = rank
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: AgentClient | None = None
        self.started_in = 0.0

    def start(self) -> AgentProcess:
        port_file = self.root / "port"
        port_file.unlink(missing_ok=True)
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpulease.agent", "serve", "--host", "127.0.0.1",
                 "--port", "0", "--port-file", str(port_file), "--token-file",
                 str(self.token_file), "--node-dir", str(self.node_dir),
                 "--node-rank", str(self.rank), "--heartbeat-interval", "0.2", *self.args],
                stdout=log, stderr=log, env=self.env, start_new_session=True,
            )  # fmt: skip
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), what="port")
        self.url = f"http://127.0.0.1:{port}"
        self.client = AgentClient(self.url, self.token)
        wait_until(self.client.health, what="health")
        self.started_in = time.monotonic() - started
        return self

    @property
    def api(self) -> AgentClient:
        assert self.client is not None
        return self.client

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the agent process only (its jobs live in their own process groups)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(10)
        if self.client is not None:
            self.client.close()

    def kill_session(self) -> None:
        """Kill every process of the agent's session: the agent and all its jobs."""
        if self.proc is None:
            return
        sid = self.proc.pid
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                if os.getsid(int(pid_dir.name)) == sid:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
        self.kill()

    def wait_state(self, task_id: str, timeout: float = 10.0) -> dict[str, Any]:
        status: dict[str, Any] = wait_until(
            lambda: (s := self.api.status(task_id))["state"] in TERMINAL and s,
            timeout,
            what=f"task {task_id} to end",
        )
        return status

    def all_logs(self, task_id: str) -> str:
        return self.api.logs(task_id, 0).data.decode()


@pytest.fixture
def agent_factory(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def make(name: str = "a", **kw: Any) -> AgentProcess:
        root = tmp_path / name
        root.mkdir()
        agent = AgentProcess(root, **kw).start()
        started.append(agent)
        return agent

    yield make
    for agent in started:
        agent.kill_session()


@pytest.fixture(scope="module")
def shared_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    """One agent for a module's tests that need no fresh node (give each its own task id)."""
    agent = AgentProcess(tmp_path_factory.mktemp("shared")).start()
    yield agent
    agent.kill_session()


@pytest.fixture
def agent(agent_factory: Callable[..., AgentProcess]) -> AgentProcess:
    return agent_factory()


def task(task_id: str = "t1", **kw: Any) -> NodeTask:
    return NodeTask(task_id=task_id, **kw)
