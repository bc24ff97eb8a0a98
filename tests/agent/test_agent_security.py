"""Only the holder of the node token gets an answer; the token never reaches a log or a job."""

from __future__ import annotations

import httpx
import pytest

from gpulease.agent.client import AgentClient, AgentUnauthorized
from tests.agent.conftest import AgentProcess, task


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}],
    ids=["none", "wrong", "other-scheme"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/health"), ("POST", "/v1/tasks"), ("GET", "/v1/nowhere")],
)
def test_requests_without_the_token_are_401(
    shared_agent: AgentProcess, headers: dict[str, str], method: str, path: str
) -> None:
    response = httpx.request(method, shared_agent.url + path, headers=headers, json={"run": "true"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthorized"


def test_the_client_raises_unauthorized_for_a_wrong_token(shared_agent: AgentProcess) -> None:
    with AgentClient(shared_agent.url, "not-the-token") as client, pytest.raises(AgentUnauthorized):
        client.health()


def test_the_token_never_appears_in_logs_or_the_job_environment(agent: AgentProcess) -> None:
    agent.api.submit(task(run="env; cat /proc/self/cmdline"))
    agent.wait_state("t1")
    httpx.get(agent.url + "/v1/health", headers={"Authorization": f"Bearer {agent.token}x"})
    agent.api.exec("t1", "env")
    assert agent.token not in agent.all_logs("t1")
    assert agent.token not in agent.log_path.read_text()
    for path in agent.node_dir.rglob("*"):
        if path.is_file():
            assert agent.token.encode() not in path.read_bytes(), path
    assert "GET /v1/health 401" in agent.log_path.read_text()  # the access log is there


def test_the_node_dir_is_private(agent: AgentProcess) -> None:
    assert agent.node_dir.stat().st_mode & 0o077 == 0


def test_the_agent_listens_only_on_the_given_address(shared_agent: AgentProcess) -> None:
    port = shared_agent.url.rsplit(":", 1)[1]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.2:{port}/v1/health", timeout=2)  # loopback, other address
