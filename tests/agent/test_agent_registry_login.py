"""``PUT /v1/registries/<host>``: the server hands a node a registry login. On a real agent
process: the answer, the agent's log (at DEBUG) and its node directory never hold the password,
and bad requests are refused without echoing it; on an agent served in this process: the login
is what :meth:`Agent.registry_login` gives the runner."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from gpulease.agent.client import AgentClient, AgentRequestError, AgentUnauthorized
from gpulease.agent.service import Agent
from tests.agent.conftest import AgentProcess
from tests.agent.inprocess import served_agent

SECRET = "ghp_Zr3g1stry-s3cret-value"


def _files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_login_is_answered_without_its_password_and_never_logged_or_written(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    node = agent_factory(args=("--log-level", "DEBUG"))
    url = f"{node.url}/v1/registries/GHCR.io"
    headers = {"Authorization": f"Bearer {node.token}"}
    answer = httpx.put(url, json={"username": "me", "password": SECRET}, headers=headers)
    assert answer.status_code == 200
    assert answer.json() == {"registry": "ghcr.io", "username": "me"}
    node.api.set_registry_login("localhost:5000", "me", SecretStr(SECRET))  # a host with a port

    cut_short = b'{"username": "me", "password": "' + SECRET.encode()  # not valid JSON
    refused = [
        httpx.put(url, json={"username": "me"}, headers=headers),  # no password
        httpx.put(url, json={"username": "", "password": SECRET}, headers=headers),
        httpx.put(url, json={"username": "me", "password": SECRET, "x": SECRET}, headers=headers),
        httpx.put(url, content=cut_short, headers=headers),
    ]
    assert [r.status_code for r in refused] == [422, 422, 422, 422]
    for r in refused:
        assert r.json()["error"]["code"] == "invalid_request" and SECRET not in r.text
    assert "password: Field required" in refused[0].text

    unauthorised = httpx.put(url, json={"username": "me", "password": SECRET})
    assert unauthorised.status_code == 401
    with pytest.raises(AgentRequestError) as info:
        node.api.set_registry_login("bad host", "me", SecretStr(SECRET))
    assert info.value.status == 404 and SECRET not in str(info.value)
    bad_token = AgentClient(node.url, "wrong")
    with pytest.raises(AgentUnauthorized):
        bad_token.set_registry_login("ghcr.io", "me", SecretStr(SECRET))
    bad_token.close()

    assert httpx.get(url, headers=headers).status_code == 405  # no way to read it back
    log = node.log_path.read_text()
    assert "PUT /v1/registries/GHCR.io 200" in log and "422" in log
    assert SECRET not in log
    assert _files_holding(node.root, SECRET) == []


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Agent, AgentClient]]:
    with served_agent(tmp_path / "node") as both:
        yield both


def test_the_runner_gets_the_login_the_server_sent(served: tuple[Agent, AgentClient]) -> None:
    agent, client = served
    assert agent.registry_login("ghcr.io") is None
    client.set_registry_login("GHCR.io", "me", SecretStr("first"))
    client.set_registry_login("ghcr.io", "me2", SecretStr(SECRET))  # a newer login replaces it
    login = agent.registry_login("ghcr.io")
    assert login is not None
    assert (login.registry, login.username, login.password) == ("ghcr.io", "me2", SECRET)
    assert SECRET not in repr(login)
    assert agent.registry_login("docker.io") is None and agent.registry_login(None) is None
