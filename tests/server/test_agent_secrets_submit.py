"""A task's secrets on the server's side of the agent channel (issue 20): ``HttpAgent.submit``
loads the task's secret set from the lookup it is given (the vault's ``load``; here a plain
function) and sends the values in the submission's body, to a real agent served in this process
whose job sees them; a set that cannot be loaded is a Permanent error naming the set, and
nothing is submitted. No log record holds the canary."""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from pydantic import SecretStr

from gpulease.agent.client import AgentClient
from gpulease.agent.service import Agent
from gpulease.controller import NodeRef
from gpulease.errors import Permanent, Retryable
from gpulease.server.agents import HttpAgent, HttpAgents, SecretSetMissing
from gpulease.wire import NodeTask, RunSpec
from tests.agent.inprocess import served_agent
from tests.waiting import wait_until

CANARY = secrets.token_hex(16)


def _task(secret_set: str | None, run: str = "true") -> NodeTask:
    spec = RunSpec(run=run, secret_set=secret_set, secret_names=("HF_TOKEN",))
    return NodeTask.for_node(spec, task_id="t1", rank=0, node_ips=("127.0.0.1",),
                             gpus_per_node=0)  # fmt: skip


def _vault(set_id: str) -> Mapping[str, SecretStr]:
    if set_id != "ss-1":
        raise KeyError(set_id)
    return {"HF_TOKEN": SecretStr(CANARY)}


def _rotated_away(set_id: str) -> Mapping[str, SecretStr]:
    raise Permanent(f"{set_id}: the key that sealed it is gone")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Agent, AgentClient]]:
    with served_agent(tmp_path / "node") as both:
        yield both


@pytest.fixture(autouse=True)
def records(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    assert all(CANARY not in r.getMessage() for r in caplog.records)


def test_a_submission_carries_the_values_of_the_tasks_set(
    node: tuple[Agent, AgentClient],
) -> None:
    agent, client = node
    asked: list[str] = []

    def lookup(set_id: str) -> Mapping[str, SecretStr]:
        asked.append(set_id)
        return _vault(set_id)

    HttpAgent(client, secrets=lookup).submit(
        _task("ss-1", run='printf %s "$HF_TOKEN" | sha256sum > seen')
    )
    assert asked == ["ss-1"]
    wait_until(lambda: agent.status("t1")["state"] == "SUCCEEDED", 10, "the task to end")
    seen = (agent.work_dir / "seen").read_text().split()[0]
    assert seen == hashlib.sha256(CANARY.encode()).hexdigest()
    assert CANARY not in str(agent.list_tasks())


def test_a_task_without_secrets_never_asks_the_store(node: tuple[Agent, AgentClient]) -> None:
    agent, client = node

    def refuse(set_id: str) -> Mapping[str, SecretStr]:
        raise AssertionError("no set to load")

    HttpAgent(client, secrets=refuse).submit(_task(None))
    assert [t["task_id"] for t in agent.list_tasks()] == ["t1"]


@pytest.mark.parametrize(
    ("lookup", "why"),
    [
        (None, "this server has no secret store"),
        (_vault, "KeyError"),  # an unknown set: its type only, not the exception's text
        (_rotated_away, "the key that sealed it is gone"),  # our own errors say why
    ],
)
def test_a_set_that_cannot_be_loaded_fails_the_submission_naming_it(
    node: tuple[Agent, AgentClient], lookup: object, why: str
) -> None:
    agent, client = node
    http = HttpAgent(client, secrets=lookup)  # type: ignore[arg-type]
    with pytest.raises(SecretSetMissing) as info:
        http.submit(_task("ss-gone"))
    assert isinstance(info.value, Permanent)  # the controller fails the cluster with it
    assert "secret set ss-gone cannot be loaded" in str(info.value) and why in str(info.value)
    assert agent.list_tasks() == []


def test_a_retryable_store_error_stays_retryable(node: tuple[Agent, AgentClient]) -> None:
    agent, client = node

    def busy(set_id: str) -> Mapping[str, SecretStr]:
        raise Retryable("the state DB is busy")

    with pytest.raises(Retryable):
        HttpAgent(client, secrets=busy).submit(_task("ss-1"))
    assert agent.list_tasks() == []


def test_the_connector_hands_its_lookup_to_every_node() -> None:
    agents = HttpAgents({}, b"k" * 32, secrets=_vault)
    try:
        node = agents.agent(NodeRef("local", "i-1", "http://127.0.0.1:9"))
        assert node.secrets is _vault
    finally:
        agents.close()
