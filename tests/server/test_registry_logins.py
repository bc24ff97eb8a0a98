"""Registry logins on the server side: before a task with an image is submitted to a node, the
configured login of its registry goes to that node's agent (a real agent, served in this
process so the test can see what it holds); a launch whose registry's password variable is
unset is refused naming the variable and the registry, and nothing is written. The password
is in no log record, message or state row."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, text

from gpulease.agent.client import AgentClient
from gpulease.agent.service import Agent
from gpulease.clock import SystemClock
from gpulease.config import registry_entries
from gpulease.errors import Permanent, UserInputError
from gpulease.providers.local import LocalProvider
from gpulease.server.agents import HttpAgent, HttpAgents
from gpulease.server.registry_logins import RegistryLoginMissing, RegistryLogins
from gpulease.server.service import ClusterService
from gpulease.state import Cluster, session_scope
from gpulease.wire import NodeTask, RunSpec
from tests.agent.inprocess import served_agent
from tests.server.conftest import task_body

SECRET = "ghp_srv-s3cret-registry-token"
CONFIG = {"containers": {"registries": {"ghcr.io": {"username": "me", "password_env": "GL_TOK"}}}}
ENTRIES = registry_entries(CONFIG)


def _task(image: str | None, registry: str | None, task_id: str = "t1") -> NodeTask:
    run = RunSpec(run="true", image=image, image_registry=registry)
    return NodeTask.for_node(run, task_id=task_id, rank=0, node_ips=("127.0.0.1",),
                             gpus_per_node=0)  # fmt: skip


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Agent, AgentClient]]:
    with served_agent(tmp_path / "node") as both:
        yield both


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_a_submission_sends_the_configured_login_first(
    node: tuple[Agent, AgentClient], records: pytest.LogCaptureFixture
) -> None:
    agent, client = node
    http = HttpAgent(client, logins=RegistryLogins(ENTRIES, {"GL_TOK": SECRET}))
    http.submit(_task("ghcr.io/org/img:v1", "ghcr.io"))
    login = agent.registry_login("ghcr.io")
    assert login is not None and (login.username, login.password) == ("me", SECRET)
    assert [t["task_id"] for t in agent.list_tasks()] == ["t1"]


@pytest.mark.parametrize(
    ("image", "registry"), [("docker.io/library/busybox", "docker.io"), (None, None)]
)
def test_no_login_is_sent_without_an_entry_or_an_image(
    node: tuple[Agent, AgentClient], image: str | None, registry: str | None
) -> None:
    agent, client = node
    http = HttpAgent(client, logins=RegistryLogins(ENTRIES, {"GL_TOK": SECRET}))
    http.submit(_task(image, registry))
    assert agent.registry_login("ghcr.io") is None and agent.registry_login("docker.io") is None
    assert [t["task_id"] for t in agent.list_tasks()] == ["t1"]


def test_an_unset_variable_fails_the_submission_and_sends_nothing(
    node: tuple[Agent, AgentClient], records: pytest.LogCaptureFixture
) -> None:
    agent, client = node
    http = HttpAgent(client, logins=RegistryLogins(ENTRIES, {"GL_TOK": ""}))
    with pytest.raises(RegistryLoginMissing) as info:
        http.submit(_task("ghcr.io/org/img:v1", "ghcr.io"))
    assert isinstance(info.value, Permanent)  # the controller fails the cluster with it
    assert "GL_TOK is not set" in str(info.value) and "ghcr.io" in str(info.value)
    assert agent.registry_login("ghcr.io") is None and agent.list_tasks() == []


@pytest.fixture
def service(engine: Engine, tmp_path: Path) -> Iterator[ClusterService]:
    providers = {"local": LocalProvider(tmp_path / "local")}
    agents = HttpAgents(providers, b"k" * 32)
    made = ClusterService(engine, providers, agents, clock=SystemClock(), owner="gl-test")
    yield made
    agents.close()


def _image_task(name: str) -> dict[str, object]:
    body = task_body("true", name=name)
    body["resources"] = {"providers": ["local"], "image_id": "docker:ghcr.io/org/img:v1"}
    return body


def test_a_launch_with_the_variable_unset_is_refused_naming_it(
    service: ClusterService, engine: Engine, records: pytest.LogCaptureFixture
) -> None:
    service.registry_logins = RegistryLogins(ENTRIES, {})
    with pytest.raises(UserInputError) as info:
        service.launch(_image_task("img"))
    message = str(info.value)
    assert message.startswith("resources.image_id: ghcr.io/org/img:v1 is pulled from ghcr.io")
    assert "GL_TOK is not set" in message and "environment the gpulease server runs in" in message
    with session_scope(engine) as session:
        assert session.scalars(select(Cluster)).all() == []

    service.registry_logins = RegistryLogins(ENTRIES, {"GL_TOK": SECRET})
    assert service.launch(_image_task("img"))["name"] == "img"
    service.launch(task_body("true", name="plain"))  # no image: nothing to check
    service.registry_logins = RegistryLogins(ENTRIES, {})
    body = _image_task("hub")
    body["resources"] = {"providers": ["local"], "image_id": "docker:ubuntu:24.04"}
    service.launch(body)  # docker.io has no entry: an anonymous pull
    with engine.connect() as conn:  # nothing of the secret in any table
        for (table,) in conn.execute(text("SELECT name FROM sqlite_master WHERE type='table'")):
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                assert SECRET not in repr(tuple(row))
