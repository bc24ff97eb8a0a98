"""A task's secrets at the API edge (issue 20), in process over a real SQLite DB: the values come
in the body's own ``secrets`` field, the view and the stored document name them only, the DB
file (and its WAL) never holds one, a secret without a value is a 422 naming it, and no 422 —
FastAPI's validation errors echo their ``input`` — repeats a value. Every value is a random
canary; the client's side (:func:`prepare_task`) sends them the same way."""

from __future__ import annotations

import secrets as random_secrets
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.client.tasks import prepare_task
from gpulease.clock import VirtualClock
from gpulease.controller import LaunchDocument
from gpulease.errors import SpecError, UserInputError
from gpulease.server.api import JobLaunchBody, LaunchBody, create_app
from gpulease.server.pools import PoolUpBody
from gpulease.server.service import ClusterService
from gpulease.server.services import ServiceBody
from gpulease.server.tasks import take_task
from gpulease.server.vault import Vault, open_vault
from gpulease.spec import parse_task
from gpulease.state import get_cluster_by_name, session_scope
from tests.controller.doubles import FakeAgents
from tests.server.conftest import task_body
from tests.server.test_api import SellingFake

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-secret-tests"


def _canary() -> str:
    return random_secrets.token_hex(16)


@pytest.fixture
def vault(engine: Engine, tmp_path: Path) -> Vault:
    return open_vault(tmp_path, engine, {})


@pytest.fixture
def http(engine: Engine, vault: Vault) -> TestClient:
    service = ClusterService(engine, {"local": SellingFake(name="local")}, FakeAgents(),
                             clock=VirtualClock(), owner="gl-test")  # fmt: skip
    service.vault = vault
    client = TestClient(create_app(service, SecretStr(TOKEN)))
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    return client


def _db_bytes(engine: Engine) -> bytes:
    path = Path(str(engine.url.database))
    return b"".join(
        p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists()
    )


def test_a_launch_takes_the_values_beside_the_task_and_keeps_only_their_names(
    http: TestClient, engine: Engine, vault: Vault
) -> None:
    token, key = _canary(), _canary()
    task = task_body("echo", name="sec", secrets={"HF_TOKEN": None})
    body = {"task": task, "secrets": {"HF_TOKEN": token, "WANDB_API_KEY": key}}
    response = http.post("/v1/clusters", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["secrets"] == ["HF_TOKEN", "WANDB_API_KEY"]  # an added name too
    with session_scope(engine) as session:
        row = get_cluster_by_name(session, "sec")
        assert row is not None
        doc = LaunchDocument.from_json(row.task)
    assert doc.run.secret_names == ("HF_TOKEN", "WANDB_API_KEY") and doc.run.secret_set
    assert doc.spec["secrets"] == {"HF_TOKEN": None, "WANDB_API_KEY": None}
    shown = [response.text, http.get("/v1/clusters").text, http.get("/v1/clusters/sec").text]
    engine.dispose()  # the WAL checkpointed or not: neither file may hold a value
    found = _db_bytes(engine)
    assert not [c for c in (token, key) for text in shown if c in text]
    assert token.encode() not in found and key.encode() not in found
    sealed = vault.load(doc.run.secret_set)  # the values are in the vault, sealed
    assert {k: v.get_secret_value() for k, v in sealed.items()} == {
        "HF_TOKEN": token, "WANDB_API_KEY": key}  # fmt: skip


def test_a_secret_without_a_value_is_a_422_naming_it(http: TestClient) -> None:
    canary = _canary()
    task = task_body("echo", name="nov", secrets={"HF_TOKEN": None, "B": None})
    response = http.post("/v1/clusters", json={"task": task, "secrets": {"B": canary}})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert message.startswith("secrets: HF_TOKEN without a value") and canary not in message


def _task(**extra: Any) -> dict[str, Any]:
    return task_body("echo", name="bad", **extra)


_BAD_BODIES: dict[str, Callable[[str], dict[str, Any]]] = {
    "secrets text": lambda c: {"task": _task(), "secrets": c},
    "secrets a list": lambda c: {"task": _task(), "secrets": [c]},
    "a value a list": lambda c: {"task": _task(), "secrets": {"HF_TOKEN": [c]}},
    "a value a mapping": lambda c: {"task": _task(), "secrets": {"HF_TOKEN": {"v": c}}},
    "another field bad": lambda c: {"task": _task(), "secrets": {"HF_TOKEN": c}, "name": ["x"]},
    "task text": lambda c: {"task": c, "secrets": {"HF_TOKEN": c}},
    "an extra field": lambda c: {"task": _task(), "secrets": {"HF_TOKEN": c}, "extra": c},
    "a bad name": lambda c: {"task": _task(), "secrets": {"1BAD": c}},
    "a node variable": lambda c: {"task": _task(), "secrets": {"GPULEASE_TASK_ID": c}},
    "also in envs": lambda c: {"task": _task(envs={"HF_TOKEN": "x"}), "secrets": {"HF_TOKEN": c}},
    "in the task": lambda c: {"task": _task(secrets={"HF_TOKEN": [c]})},
}


@pytest.mark.parametrize("make", _BAD_BODIES.values(), ids=_BAD_BODIES.keys())
def test_no_422_echoes_a_value(http: TestClient, make: Callable[[str], dict[str, Any]]) -> None:
    canary = _canary()
    response = http.post("/v1/clusters", json=make(canary))
    assert response.status_code == 422, response.text
    assert canary not in response.text and response.json()["error"]["code"] == "invalid"


def test_a_body_that_is_no_json_object_is_a_422_without_its_text(http: TestClient) -> None:
    canary = _canary()
    for content in (f'["{canary}"]', f'{{"secrets": {{"A": "{canary}"'):
        response = http.post("/v1/clusters", content=content,
                             headers={"content-type": "application/json"})  # fmt: skip
        assert response.status_code == 422 and canary not in response.text, response.text


def test_every_launch_body_takes_secrets_as_secret_strings() -> None:
    for body in (LaunchBody, JobLaunchBody, ServiceBody, PoolUpBody):
        assert body.model_fields["secrets"].annotation == dict[str, SecretStr], body


def test_take_task_hands_the_values_on_and_the_run_and_spec_carry_names_only() -> None:
    token, key = _canary(), _canary()
    data = task_body("echo", name="t", secrets={"HF_TOKEN": None, "A_KEY": key})
    taken = take_task(data, secrets={"HF_TOKEN": SecretStr(token)})
    assert {n: v.get_secret_value() for n, v in taken.secrets.items()} == {
        "HF_TOKEN": token, "A_KEY": key}  # fmt: skip
    assert taken.run.secret_names == ("A_KEY", "HF_TOKEN")
    shown = [str(taken.spec), taken.run.model_dump_json(), repr(taken)]
    assert not [c for c in (token, key) for text in shown if c in text]


def test_the_client_sends_values_only_in_the_secrets_field(tmp_path: Path) -> None:
    token, flag, env = _canary(), _canary(), _canary()
    task = parse_task(f"run: echo\nsecrets:\n  HF_TOKEN: {token}\n  B: null\n", secrets={"B": flag})
    prepared = prepare_task(task, cwd=tmp_path, envs={"X": "1"}, secrets={"C": SecretStr(env)})
    assert prepared.body["secrets"] == {"HF_TOKEN": None, "B": None, "C": None}
    assert prepared.secrets_field() == {"HF_TOKEN": token, "B": flag, "C": env}
    assert not [c for c in (token, flag, env) if c in str(prepared.body) or c in repr(prepared)]
    mapping = {"run": "echo", "secrets": {"HF_TOKEN": None}}
    from_env = prepare_task(mapping, cwd=tmp_path, environ={"HF_TOKEN": env})
    assert from_env.secrets_field() == {"HF_TOKEN": env}
    with pytest.raises(SpecError, match=r"^secrets\.HF_TOKEN: has no value"):
        prepare_task(mapping, cwd=tmp_path)


def test_a_multi_line_secret_is_refused_at_launch_naming_it_not_its_value() -> None:
    canary = _canary()
    task = task_body("echo", name="pem", secrets={"KEY_PEM": None})
    with pytest.raises(UserInputError) as refused:
        take_task(task, secrets={"KEY_PEM": SecretStr(f"-----BEGIN-----\n{canary}\n")})
    assert "KEY_PEM holds a line break" in str(refused.value) and canary not in str(refused.value)
