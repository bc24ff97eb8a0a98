"""The agent's spot-notice poller against a tiny local IMDSv2 server (stdlib http.server): no
notice → nothing happens; a notice → the running task is preempted like the server's preempt
call does (preemption file, SIGTERM) — checked on a real agent process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpulease.agent.imds import ACTION_PATH, TOKEN_PATH, ImdsPoller, grace_for
from gpulease.wire import SERVICE_VARIABLE
from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until

TOKEN = "imds-token-123"


class FakeImds:
    def __init__(self) -> None:
        self.action: dict[str, Any] | None = None
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                fake.requests.append(f"PUT {self.path}")
                ok = (
                    self.path == TOKEN_PATH and self.headers["X-aws-ec2-metadata-token-ttl-seconds"]
                )
                self._send(200 if ok else 400, TOKEN.encode() if ok else b"")

            def do_GET(self) -> None:
                fake.requests.append(f"GET {self.path}")
                if self.headers["X-aws-ec2-metadata-token"] != TOKEN:
                    self._send(401, b"")
                elif self.path != ACTION_PATH or fake.action is None:
                    self._send(404, b"")
                else:
                    self._send(200, json.dumps(fake.action).encode())

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds()
    yield fake
    fake.close()


def test_no_notice_means_no_preemption_and_a_notice_preempts(imds: FakeImds) -> None:
    calls: list[float] = []
    poller = ImdsPoller(calls.append, base_url=imds.url)
    assert poller.poll_once() is None and calls == []
    assert imds.requests == [f"PUT {TOKEN_PATH}", f"GET {ACTION_PATH}"]
    imds.action = {"action": "terminate", "time": "2000-01-01T00:00:00Z"}
    assert poller.poll_once() == imds.action
    assert calls == [0.0]  # the announced time has passed: no grace left


def test_an_imds_that_does_not_answer_is_not_an_error() -> None:
    calls: list[float] = []
    poller = ImdsPoller(calls.append, base_url="http://127.0.0.1:9", timeout=0.2)
    assert poller.poll_once() is None and calls == []


def test_the_grace_ends_before_the_announced_time() -> None:
    assert grace_for({"action": "terminate", "time": "1970-01-01T00:02:00Z"}, 0.0) == 90.0
    assert grace_for({"action": "terminate", "time": "1970-01-01T00:01:00Z"}, 0.0) == 45.0
    assert grace_for({"action": "stop"}, 0.0) == 90.0


def test_a_notice_preempts_the_running_task_of_a_real_agent(
    imds: FakeImds, agent_factory: Callable[..., AgentProcess]
) -> None:
    agent = agent_factory(
        env={"GPULEASE_AGENT_IMDS_URL": imds.url, "GPULEASE_AGENT_IMDS_INTERVAL": "0.1"}
    )
    run = (
        'on_term() { test -e "$GPULEASE_PREEMPTION_FILE" && echo notice-seen; exit 75; }; '
        "trap on_term TERM; echo training; while true; do sleep 0.02; done"
    )
    agent.api.submit(task(run=run))
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    wait_until(lambda: len(imds.requests) >= 4, what="the agent to poll the metadata")
    assert agent.api.status("t1")["state"] == "RUNNING"
    imds.action = {"action": "terminate", "time": "2999-01-01T00:00:00Z"}
    status = agent.wait_state("t1")
    assert (status["state"], status["stop_requested"]) == ("PREEMPTED", "preempt")
    assert "notice-seen" in agent.all_logs("t1")


def test_a_notice_leaves_a_service_replica_serving(
    imds: FakeImds, agent_factory: Callable[..., AgentProcess]
) -> None:
    """A replica has nothing to checkpoint: the server drains it on the same notice, so the
    agent does not SIGTERM it (its app would answer 503 to requests still in flight)."""
    agent = agent_factory(
        env={"GPULEASE_AGENT_IMDS_URL": imds.url, "GPULEASE_AGENT_IMDS_INTERVAL": "0.1"}
    )
    run = "trap 'echo got-term; exit 75' TERM; echo serving; while true; do sleep 0.02; done"
    agent.api.submit(task(run=run, envs={SERVICE_VARIABLE: "web", "PORT": "8080"}))
    wait_until(lambda: agent.api.logs("t1").data, what="the replica to start")
    imds.action = {"action": "terminate", "time": "2999-01-01T00:00:00Z"}
    seen = len(imds.requests)
    wait_until(lambda: len(imds.requests) >= seen + 6, what="the agent to read the notice")
    status = agent.api.status("t1")
    assert (status["state"], status["stop_requested"]) == ("RUNNING", None)
    assert "got-term" not in agent.all_logs("t1")
