"""The slurm provider against a REAL Slurm cluster (``scripts/dev-slurm.sh``): what sbatch gets,
idempotent launches, tags in the job comment, terminate, requeue → PREEMPTED, offers from sinfo.
Pure parts (script shape, settings, error classes) need no cluster."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.catalog._catalog import Catalog
from gpulease.errors import UserInputError
from gpulease.providers.base import (
    TAG_OWNER,
    TAG_REQUEST,
    CapacityError,
    EventKind,
    InstanceState,
    LaunchRequest,
    ProviderError,
    ProviderUnavailable,
)
from gpulease.providers.registry import configured_providers, runtime_catalog
from gpulease.providers.slurm import SlurmProvider, SlurmSettings, script
from gpulease.providers.slurm.commands import classify, parse_gres
from gpulease.server.providers import build_providers
from tests.slurmfixtures import slurm_cluster, slurm_env  # noqa: F401 - fixtures
from tests.waiting import wait_until

pytestmark = pytest.mark.xdist_group("slurm")
#: this run's owner tag: the jobs these tests make carry it, and cleanup finds them by it
OWNER = f"owner-{uuid.uuid4().hex[:8]}"


def _request(**kw: Any) -> LaunchRequest:
    kw.setdefault("request_id", f"req-{uuid.uuid4().hex[:10]}")
    kw.setdefault("cluster", "c1")
    kw.setdefault("owner", OWNER)
    return LaunchRequest(**kw)


@pytest.fixture
def provider(slurm_env: str, tmp_path: Path) -> Iterator[SlurmProvider]:  # noqa: F811
    p = SlurmProvider(tmp_path / "slurm", SlurmSettings.from_mapping({}))
    yield p
    p.terminate([i.id for i in p.list_instances({TAG_OWNER: OWNER})])


def _squeue(job_id: str, conf: str) -> dict[str, Any]:
    env = {"SLURM_CONF": conf, "PATH": "/usr/bin:/bin"}
    argv = ["squeue", "--json", "--states=all"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=20, check=True)
    return next(j for j in json.loads(out.stdout)["jobs"] if str(j["job_id"]) == job_id)


# ---- no cluster needed -------------------------------------------------------------------------


def test_sbatch_asks_for_one_allocation_of_num_nodes_nodes(tmp_path: Path) -> None:
    settings = SlurmSettings.from_mapping(
        {"account": "ml", "qos": "high", "sbatch_options": ["--exclusive"], "slurm_conf": "/x"}
    )
    request = _request(num_nodes=2, gpus_per_node=4, request_id="r1", tags={"team": "v"})
    argv = script.sbatch_argv(request, settings, tmp_path, "gpu")
    assert argv[0] == "sbatch" and argv[-1] == str(tmp_path / "batch.sh")
    for flag in ("--nodes=2", "--gpus-per-node=4", "--partition=gpu", "--job-name=gpulease-r1",
                 "--requeue", "--open-mode=append", "--ntasks-per-node=1", "--account=ml",
                 "--qos=high", "--exclusive"):  # fmt: skip
        assert flag in argv
    comment = next(a for a in argv if a.startswith("--comment=")).removeprefix("--comment=")
    assert script.parse_comment(comment)["tags"] == {**request.all_tags()}  # type: ignore[index]
    assert "srun --ntasks-per-node=1" in script.batch_script(tmp_path)


def test_every_node_runs_an_agent_with_its_own_dir_token_and_rank(tmp_path: Path) -> None:
    text = script.node_script(tmp_path, "/venv/bin/python", "127.0.0.1", tmp_path / "venvs")
    assert f'node={tmp_path}/"node-$SLURM_NODEID"' in text
    assert 'export GPULEASE_INSTANCE_ID="$SLURM_JOB_ID.$SLURM_NODEID"' in text
    serve = next(line for line in text.splitlines() if line.startswith("exec "))
    for part in ("/venv/bin/python -m gpulease.agent serve", "--host 127.0.0.1", "--port 0",
                 '--port-file "$node/port"', '--token-file "$node/token"',
                 '--node-dir "$node/node"', '--node-rank "$SLURM_NODEID"',
                 f"--venv-root {tmp_path / 'venvs'}"):  # fmt: skip
        assert part in serve
    assert "--venv-root" not in script.node_script(tmp_path, "/venv/bin/python", "127.0.0.1")


def test_settings_errors_name_the_field() -> None:
    cases = [({"partitions": 3}, "partitions"), ({"price_per_gpu_hour": -1}, "price_per_gpu_hour"),
             ({"login": "ssh"}, "login"), ({"x": 1}, "x")]  # fmt: skip
    for section, field in cases:
        with pytest.raises(UserInputError, match=f"providers.slurm.{field}"):
            SlurmSettings.from_mapping(section)
    assert SlurmSettings.from_mapping({"login": {"ssh": "me@login1"}}).ssh == "me@login1"


def test_failures_are_classified() -> None:
    assert isinstance(classify("squeue", "Unable to contact slurm controller"), ProviderUnavailable)
    no_room = classify(
        "sbatch", "error: Requested node configuration is not available", partition="p"
    )
    assert isinstance(no_room, CapacityError) and no_room.zone == "p"
    assert isinstance(classify("sbatch", "error: Invalid partition name specified"), ProviderError)
    assert parse_gres("gpu:a100:8(S:0-1)") == (8, "a100") and parse_gres("(null)") == (0, None)


# ---- against the cluster -----------------------------------------------------------------------


def test_launch_is_idempotent_and_tags_ride_in_the_comment(
    provider: SlurmProvider,
    slurm_env: str,  # noqa: F811
) -> None:
    request = _request(num_nodes=2, gpus_per_node=1, tags={"team": "vision"})
    first = provider.launch(request)
    again = provider.launch(request)
    assert [i.id for i in again] == [i.id for i in first]
    fresh = SlurmProvider(provider.root.parent / "other", SlurmSettings.from_mapping({}))
    assert [i.id for i in fresh.launch(request)] == [i.id for i in first]  # found by job name
    job = _squeue(first[0].id.split(".")[0], slurm_env)
    assert job["name"] == f"gpulease-{request.request_id}"
    assert json.loads(job["comment"])["tags"]["team"] == "vision"
    listed = provider.list_instances({TAG_REQUEST: request.request_id})
    assert sorted(i.id for i in listed) == sorted(i.id for i in first)


def test_terminate_cancels_the_allocation(provider: SlurmProvider) -> None:
    request = _request(num_nodes=2)
    ids = [i.id for i in provider.launch(request)]
    provider.terminate(ids)
    wait_until(lambda: all(i.state is InstanceState.TERMINATED
                           for i in provider.list_instances({TAG_REQUEST: request.request_id})),
               20, "terminated")  # fmt: skip
    provider.terminate(ids)  # a no-op now
    provider.terminate(["999999.0", "not-ours"])


def test_a_requeue_is_a_preempted_event(provider: SlurmProvider, slurm_env: str) -> None:  # noqa: F811
    request = _request(gpus_per_node=1)
    ids = [i.id for i in provider.launch(request)]
    tags = {TAG_REQUEST: request.request_id}
    wait_until(lambda: all(i.agent_url for i in provider.list_instances(tags)), 20, "the agent")
    provider.poll_events()
    job_id = ids[0].split(".")[0]
    env = {"SLURM_CONF": slurm_env, "PATH": "/usr/bin:/bin"}
    subprocess.run(["scontrol", "requeue", job_id], env=env, check=True, timeout=20)
    events = wait_until(
        lambda: [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTED],
        20, "a PREEMPTED event",
    )  # fmt: skip
    assert [e.instance_id for e in events] == ids

    def running_again() -> list[Any]:
        # a requeued job waits 120 s unless told to start now (once it is PENDING again)
        update = ["scontrol", "update", f"jobid={job_id}", "StartTime=now"]
        subprocess.run(update, env=env, capture_output=True, timeout=20, check=False)
        listed = provider.list_instances(tags)
        return [i for i in listed if i.state is InstanceState.RUNNING and i.agent_url]

    back = wait_until(running_again, 60, "running again")
    assert [i.id for i in back] == ids
    assert not [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTED]


def test_offers_come_from_sinfo(slurm_env: str, tmp_path: Path) -> None:  # noqa: F811
    provider = SlurmProvider.from_config({"price_per_gpu_hour": 1.5}, tmp_path)
    offers = provider.offers(Catalog.load()).table
    assert set(offers.gpu_count.tolist()) == {0, 1, 2, 4}  # 0: the CPU-only shape (gpu-cpu)
    assert set(offers.zone.tolist()) == {"gpu"} and set(offers.provider.tolist()) == {"slurm"}
    assert sorted(offers.price_on_demand.tolist()) == [0.0, 1.5, 3.0, 6.0]
    assert "slurm" in configured_providers({})  # SLURM_CONF alone enables slurm
    sellers = build_providers({})
    assert isinstance(sellers["slurm"], SlurmProvider)
    assert "slurm" in set(runtime_catalog(sellers).offers.provider.tolist())


def test_a_node_failure_is_a_preempted_event(provider: SlurmProvider, slurm_env: str) -> None:  # noqa: F811
    """A node going DOWN under a running allocation (what a hardware failure does): the job is
    requeued by Slurm (``--requeue``) and the provider reports it preempted."""
    request = _request(gpus_per_node=1)
    ids = [i.id for i in provider.launch(request)]
    tags = {TAG_REQUEST: request.request_id}
    wait_until(lambda: all(i.agent_url for i in provider.list_instances(tags)), 20, "the agent")
    provider.poll_events()
    job = _squeue(ids[0].split(".")[0], slurm_env)
    node = str(job["nodes"])
    env = {"SLURM_CONF": slurm_env, "PATH": "/usr/bin:/bin"}
    down = ["scontrol", "update", f"nodename={node}", "state=down", "reason=gpulease-test"]
    subprocess.run(down, env=env, check=True, timeout=20)
    try:
        events = wait_until(
            lambda: [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTED],
            60, "a PREEMPTED event",
        )  # fmt: skip
        assert [e.instance_id for e in events] == ids
    finally:
        resume = ["scontrol", "update", f"nodename={node}", "state=resume"]
        subprocess.run(resume, env=env, check=False, timeout=20)
        provider.terminate(ids)
