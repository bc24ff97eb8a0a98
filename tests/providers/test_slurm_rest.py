"""The slurm provider through slurmrestd (``providers.slurm.rest_url``) against a REAL cluster
with JWT auth (``scripts/dev-slurm.sh start --rest``, its own dir and ports): the conformance
suite, a launch that ``squeue`` of that cluster shows, cancel; settings and pure parts too."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpulease.errors import UserInputError
from gpulease.providers.base import (
    Instance,
    LaunchRequest,
    ProviderError,
    ProviderUnavailable,
)
from gpulease.providers.slurm import SlurmProvider, SlurmSettings
from gpulease.providers.slurm.rest import SlurmRest, expand_hostlist
from tests.providers.conformance import Harness, ProviderConformance
from tests.providers.test_slurm_conformance import agent_pids
from tests.slurmfixtures import slurm_rest_cluster  # noqa: F401 - fixture
from tests.waiting import wait_until

pytestmark = pytest.mark.xdist_group("slurm")


def _settings(cluster: dict[str, str]) -> SlurmSettings:
    return SlurmSettings.from_mapping(
        {"slurm_conf": cluster["SLURM_CONF"], "rest_url": cluster["SLURM_REST_URL"]}
    )


@pytest.fixture
def rest_env(
    slurm_rest_cluster: dict[str, str],  # noqa: F811 - fixture
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    monkeypatch.setenv("SLURM_JWT", slurm_rest_cluster["SLURM_JWT"])
    return slurm_rest_cluster


@pytest.fixture
def harness(rest_env: dict[str, str], tmp_path: Path) -> Iterator[Harness]:
    provider = SlurmProvider(tmp_path / "slurm", _settings(rest_env))
    assert isinstance(provider.cli, SlurmRest)

    def processes(instances: list[Instance]) -> list[int]:
        return agent_pids([i.id for i in instances])

    yield Harness(provider, node_processes=processes, timeout=20.0)
    provider.close()


class TestSlurmRestConformance(ProviderConformance):
    pass


def _squeue(cluster: dict[str, str]) -> str:
    env = {"SLURM_CONF": cluster["SLURM_CONF"], "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}
    return subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T"], env=env, capture_output=True, text=True,
        timeout=30, check=True,
    ).stdout  # fmt: skip


def test_launch_through_rest_shows_in_squeue_and_cancel_works(
    rest_env: dict[str, str], tmp_path: Path
) -> None:
    provider = SlurmProvider(tmp_path / "slurm", _settings(rest_env))
    request = LaunchRequest(
        request_id=f"req-{uuid.uuid4().hex[:10]}", cluster="c1", owner="rest-test",
        num_nodes=2, gpus_per_node=1,
    )  # fmt: skip
    instances = provider.launch(request)
    job_id = instances[0].id.split(".")[0]
    assert [i.node_rank for i in instances] == [0, 1]
    assert f"{job_id}|gpulease-{request.request_id}|" in _squeue(rest_env)
    provider.terminate([i.id for i in instances])
    wait_until(lambda: f"{job_id}|" not in _squeue(rest_env), 20, "the job to leave squeue")
    provider.terminate([i.id for i in instances])  # a second cancel is harmless


def test_bad_token_is_a_clear_error(rest_env: dict[str, str], monkeypatch: Any) -> None:
    monkeypatch.setenv("SLURM_JWT", "not-a-token")
    with pytest.raises(ProviderError) as info:  # slurmrestd: "Failed while looking for jobs"
        SlurmRest(_settings(rest_env)).jobs()
    assert "not-a-token" not in str(info.value)


def test_missing_token_names_the_variable(monkeypatch: Any) -> None:
    monkeypatch.delenv("MY_JWT", raising=False)
    rest = SlurmRest(SlurmSettings.from_mapping(
        {"rest_url": "http://127.0.0.1:1", "rest_token_env": "MY_JWT"}
    ))  # fmt: skip
    with pytest.raises(ProviderError, match="MY_JWT"):
        rest.jobs()


def test_unreachable_slurmrestd_is_unavailable_after_retries(monkeypatch: Any) -> None:
    monkeypatch.setenv("SLURM_JWT", "x")
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    rest = SlurmRest(
        SlurmSettings.from_mapping({"rest_url": "http://127.0.0.1:1"}),
        transport=httpx.MockTransport(refuse), retry_base=0.0, attempts=3,
    )  # fmt: skip
    with pytest.raises(ProviderUnavailable):
        rest.jobs()
    assert len(calls) == 3
    assert calls[0].headers["X-SLURM-USER-TOKEN"] == "x"


def test_error_bodies_are_classified(monkeypatch: Any) -> None:
    monkeypatch.setenv("SLURM_JWT", "x")
    body = {"errors": [{"error": "Requested node configuration is not available"}]}
    rest = SlurmRest(
        SlurmSettings.from_mapping({"rest_url": "http://127.0.0.1:1"}),
        transport=httpx.MockTransport(lambda r: httpx.Response(500, json=body)),
    )  # fmt: skip
    from gpulease.providers.base import CapacityError

    with pytest.raises(CapacityError):
        rest.request("GET", "/jobs")


@pytest.mark.parametrize("bad", ["ftp://x", "127.0.0.1:6820", "", 5, "http://"])
def test_rest_url_is_validated(bad: object) -> None:
    with pytest.raises(UserInputError, match=r"providers\.slurm\.rest_url"):
        SlurmSettings.from_mapping({"rest_url": bad})


def test_rest_settings() -> None:
    s = SlurmSettings.from_mapping({"rest_url": "https://slurm.example:6820/"})
    assert (s.rest_url, s.rest_user, s.rest_token_env) == (
        "https://slurm.example:6820", "root", "SLURM_JWT",
    )  # fmt: skip
    with pytest.raises(UserInputError, match="rest_token_env"):
        SlurmSettings.from_mapping({"rest_url": "http://h:1", "rest_token_env": "a b"})
    with pytest.raises(UserInputError, match="sbatch_options"):
        SlurmSettings.from_mapping({"rest_url": "http://h:1", "sbatch_options": ["--x"]})


def test_expand_hostlist() -> None:
    assert expand_hostlist("vm,vm-[1-2]") == ["vm", "vm-1", "vm-2"]
    assert expand_hostlist("n[01-03,7]x") == ["n01x", "n02x", "n03x", "n7x"]
    assert expand_hostlist("") == []
