"""Registry credentials (config ``containers.registries``): names in files, secrets nowhere."""

from __future__ import annotations

import pytest

from gpulease.config import RegistryEntry, registry_entries, resolve_credential
from gpulease.errors import UserInputError
from gpulease.wire import NodeTask, RunSpec

_SECRET = "ghp_s3cr3t-token-value"
_CONFIG = {"containers": {"registries": {"GHCR.io": {"username": "me", "password_env": "TOK"}}}}


def test_entries_are_read_by_lower_cased_host() -> None:
    assert registry_entries(_CONFIG) == {
        "ghcr.io": RegistryEntry(registry="ghcr.io", username="me", password_env="TOK")
    }
    assert registry_entries({}) == {}


def test_a_resolved_credential_never_shows_its_secret() -> None:
    cred = resolve_credential(registry_entries(_CONFIG), "ghcr.io", {"TOK": _SECRET})
    assert cred is not None
    assert cred.secret() == _SECRET
    for shown in (repr(cred), str(cred), cred.model_dump_json(), str(cred.model_dump())):
        assert _SECRET not in shown
    assert "me" in repr(cred)


def test_the_node_task_carries_the_registry_name_not_the_secret() -> None:
    run = RunSpec(run="x", image="ghcr.io/org/img:v1", image_registry="ghcr.io")
    node = NodeTask.for_node(run, task_id="t", rank=0, node_ips=("1.2.3.4",), gpus_per_node=0)
    for shown in (repr(run), run.model_dump_json(), repr(node), str(node.wire())):
        assert "ghcr.io" in shown and _SECRET not in shown


def test_an_unconfigured_registry_is_an_anonymous_pull() -> None:
    assert resolve_credential(registry_entries(_CONFIG), "docker.io", {}) is None


def test_an_unset_variable_is_named_without_a_value() -> None:
    with pytest.raises(UserInputError, match=r"ghcr\.io\.password_env: .*TOK is not set"):
        resolve_credential(registry_entries(_CONFIG), "ghcr.io", {"TOK": ""})


@pytest.mark.parametrize(
    ("registries", "field"),
    [
        ({"ghcr.io": {"username": "me", "password": _SECRET}}, "ghcr.io.password:"),
        ({"ghcr.io": {"username": "me", "password_env": "1X"}}, "ghcr.io.password_env:"),
        ({"ghcr.io": {"password_env": "TOK"}}, "ghcr.io.username:"),
        ({"ghcr.io": {"username": "me", "password_env": "T", "x": 1}}, "ghcr.io.x:"),
        ({"bad host": {"username": "me", "password_env": "T"}}, "bad host:"),
        ({"ghcr.io": "me"}, "ghcr.io:"),
        (["ghcr.io"], "containers.registries:"),
    ],
)
def test_bad_entries_name_the_field(registries: object, field: str) -> None:
    with pytest.raises(UserInputError) as info:
        registry_entries({"containers": {"registries": registries}})
    assert field in str(info.value)
    assert _SECRET not in str(info.value)
