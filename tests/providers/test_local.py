"""What the local provider does beyond the shared contract: fake GPUs per node, tokens and agent
URLs the server can use, the registry surviving a restart, kills that reach every job, dead
nodes reported as events, stop/start keeping the node."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.agent.client import AgentClient
from gpulease.errors import UserInputError
from gpulease.providers.base import (
    TAG_OWNER,
    CapacityError,
    EventKind,
    InstanceState,
    LaunchRequest,
    ProviderError,
    QuotaError,
)
from gpulease.providers.local import LocalProvider
from gpulease.wire import NodeTask
from tests.providers.conformance import Harness
from tests.providers.procs import node_pids
from tests.waiting import wait_until


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(LocalProvider(tmp_path / "local", gpus=4, kill_grace_s=0.3))
    yield harness
    harness.cleanup()


def _local(h: Harness) -> LocalProvider:
    assert isinstance(h.provider, LocalProvider)
    return h.provider


def _client(h: Harness, instance_id: str) -> AgentClient:
    provider = _local(h)
    (instance,) = [i for i in provider.list_instances({}) if i.id == instance_id]
    assert instance.agent_url
    return AgentClient(instance.agent_url, provider.node_token(instance_id))


def _run(client: AgentClient, run: str, task_id: str = "t") -> str:
    client.submit(NodeTask(task_id=task_id, run=run))
    active = {"PENDING", "SETTING_UP", "RUNNING"}
    wait_until(lambda: client.status(task_id)["state"] not in active, 10, f"task {task_id} to end")
    return client.logs(task_id).data.decode()


def test_nodes_get_their_own_fake_gpus(local: Harness) -> None:
    instances = local.launch(local.request(num_nodes=2, gpus_per_node=2))
    seen = [_run(_client(local, i.id), "echo $CUDA_VISIBLE_DEVICES").strip() for i in instances]
    assert seen == ["0,1", "2,3"]


def test_gpus_are_a_pool_capacity_then_quota(local: Harness) -> None:
    local.launch(local.request(num_nodes=1, gpus_per_node=3))
    with pytest.raises(CapacityError):
        local.launch(local.request(num_nodes=1, gpus_per_node=2))
    with pytest.raises(QuotaError):
        local.launch(local.request(gpus_per_node=5))


def test_terminated_nodes_give_their_gpus_back(local: Harness) -> None:
    first = local.launch(local.request(gpus_per_node=4))
    local.provider.terminate([first[0].id])
    local.wait_gone([first[0].id])
    again = local.launch(local.request(gpus_per_node=4))
    assert _run(_client(local, again[0].id), "echo $CUDA_VISIBLE_DEVICES").strip() == "0,1,2,3"


def test_launch_returns_running_nodes_with_agent_urls_and_tokens(local: Harness) -> None:
    started = time.monotonic()
    instances = local.launch(local.request(num_nodes=2))
    assert time.monotonic() - started < 2.5
    assert all(i.state is InstanceState.RUNNING and i.agent_url for i in instances)
    assert all(i.private_ip == "127.0.0.1" for i in instances)
    health = _client(local, instances[1].id).health()
    assert health["node_rank"] == 1
    provider = _local(local)
    token = provider.node_token(instances[0].id)
    assert "**" in repr(token)  # a SecretStr: never printed by accident
    token_file = provider.root / "nodes" / instances[0].id / "token"
    assert token_file.stat().st_mode & 0o077 == 0
    assert token.get_secret_value() not in json.dumps(
        [json.loads(p.read_text()) for p in (provider.root / "instances").glob("*.json")]
    )


def test_launch_to_the_first_line_of_output_is_quick(local: Harness) -> None:
    started = time.monotonic()
    (instance,) = local.launch(local.request())
    client = _client(local, instance.id)
    client.submit(NodeTask(task_id="hello", run="echo hello"))
    local.wait_for(lambda: client.logs("hello").data == b"hello\n", "the first line")
    assert time.monotonic() - started < 3.0  # the target; typically ~0.4 s


def test_a_new_provider_object_sees_the_same_cloud(local: Harness, tmp_path: Path) -> None:
    instances = local.launch(local.request(num_nodes=2))
    restarted = LocalProvider(tmp_path / "local")  # the server restarted
    listed = restarted.list_instances({TAG_OWNER: local.owner})
    assert {(i.id, i.state, i.agent_url) for i in listed} == {
        (i.id, i.state, i.agent_url) for i in instances
    }
    assert restarted.launch(local.request(request_id=instances[0].tags["gpulease-request"],
                                          num_nodes=2)) == listed  # fmt: skip


def test_terminate_kills_jobs_that_ignore_sigterm(local: Harness) -> None:
    (instance,) = local.launch(local.request())
    client = _client(local, instance.id)
    client.submit(NodeTask(task_id="stubborn", run="trap '' TERM; sleep 60 & wait"))
    local.wait_for(lambda: len(node_pids(_local(local), [instance.id])) >= 3, "the job")
    local.provider.terminate([instance.id])
    local.wait_gone([instance.id])
    assert node_pids(_local(local), [instance.id]) == []


def test_a_node_whose_processes_die_is_terminated_with_an_event(local: Harness) -> None:
    (instance,) = local.launch(local.request())
    local.provider.poll_events()
    for pid in node_pids(_local(local), [instance.id]):
        os.kill(pid, 9)
    local.wait_gone([instance.id])
    events = [e for e in local.provider.poll_events() if e.instance_id == instance.id]
    assert [e.kind for e in events] == [EventKind.STATE_CHANGE]
    assert "exited without a terminate" in events[0].detail


def test_stop_keeps_the_node_dir_token_and_task_record(local: Harness) -> None:
    (instance,) = local.launch(local.request())
    provider = _local(local)
    token = provider.node_token(instance.id).get_secret_value()
    assert _run(_client(local, instance.id), "echo before", "job") == "before\n"
    provider.stop([instance.id])
    local.wait_for(lambda: local.states([instance.id])[instance.id] is InstanceState.STOPPED, "")
    assert node_pids(provider, [instance.id]) == []
    provider.start([instance.id])
    local.wait_running([instance.id])
    assert provider.node_token(instance.id).get_secret_value() == token
    client = _client(local, instance.id)
    assert client.status("job")["state"] == "SUCCEEDED"  # the new agent reads the node dir
    assert client.logs("job").data == b"before\n"


def test_a_launch_interrupted_before_the_spawn_is_finished_by_launching_again(
    local: Harness, tmp_path: Path
) -> None:
    request = local.request()
    broken = LocalProvider(tmp_path / "local", python="/no/such/python")
    with pytest.raises(ProviderError):
        broken.launch(request)
    (pending,) = local.provider.list_instances({TAG_OWNER: local.owner})
    assert pending.state is InstanceState.PENDING and pending.agent_url is None
    (instance,) = local.launch(request)
    assert instance.id == pending.id and instance.state is InstanceState.RUNNING


def test_a_request_id_cannot_be_reused_for_another_shape(local: Harness) -> None:
    request = local.request(num_nodes=1)
    local.launch(request)
    with pytest.raises(ProviderError):
        local.launch(LaunchRequest(request.request_id, request.cluster, local.owner, num_nodes=2))


def test_from_config_reads_the_local_section(tmp_path: Path) -> None:
    provider = LocalProvider.from_config({"providers": {"local": {"root": str(tmp_path / "x"),
                                                                   "gpus": 8}}})  # fmt: skip
    assert provider.root == tmp_path / "x" and provider.gpus == 8


def test_from_config_refuses_a_bad_gpu_count(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match=r"providers\.local\.gpus"):
        LocalProvider.from_config({"providers": {"local": {"gpus": "four"}}})
