"""Managed jobs under faults, through the CLI and a real server on the sim provider: the server
is killed (SIGKILL) while a job runs and again while it recovers from a preemption, restarted by
the next CLI call, and the job goes on with no attempt launched twice; a cancel during recovery
leaves nothing running. A task that fails is restarted ``max_restarts_on_errors`` times, then the
job FAILS. Losing one node of two (the instance gone) or a node's agent (frozen: N heartbeats
missed) recovers the job on a fresh attempt."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import TAG_CLUSTER, InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli, configure_sim, show_job, stop_server_and_sim_nodes
from tests.cli.test_jobs_spot_train import write_trace
from tests.providers.procs import node_pids
from tests.server.conftest import wait_until


@pytest.fixture
def user(cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, 10), (0, 20), (1, 600)], gap_s=60)  # one outage: 10 s → 30 s
    configure_sim(
        cli,
        "    time_scale: 60\n    provision_seconds: [30, 60]\n"
        f"    notice_seconds: 60\n    spot_trace: {trace}\n",
    )
    yield cli
    stop_server_and_sim_nodes(cli)


def _kill_server(user: Cli) -> None:
    info = json.loads((user.home / "server.json").read_text())
    os.kill(int(info["pid"]), signal.SIGKILL)
    wait_until(lambda: not _alive(int(info["pid"])) or None, 10, "the server to die")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _launch_running(user: Cli, task: Path) -> str:
    """Launch ``task`` as job 1 on sim, wait until it runs; its first attempt's cluster name."""
    user("jobs", "launch", str(task), "--provider", "sim", "--detach", check=True)
    wait_until(lambda: show_job(user)["status"] == "running" or None, 120, "the job to run")
    name: str = show_job(user)["attempts"][0]["name"]
    return name


def _wait_recovered(user: Cli) -> None:
    def recovered() -> bool | None:
        view = show_job(user)
        return (view["attempt"] >= 2 and view["status"] == "running") or None

    wait_until(recovered, 120, "the job to run again on a fresh attempt")


def _cancel(user: Cli) -> None:
    user("jobs", "cancel", "1", check=True)
    wait_until(lambda: show_job(user)["status"] == "cancelled" or None, 120, "the cancel")


def _instances_per_cluster(user: Cli) -> Counter[str]:
    nodes = LocalProvider(user.home / "sim" / "local")
    return Counter(i.tags[TAG_CLUSTER] for i in nodes.list_instances({}))


@pytest.mark.slow
def test_server_killed_while_running_and_recovering_then_cancel(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "long.yaml"
    task.write_text(
        "name: long\nresources:\n  accelerators: T4:1\n  use_spot: true\n"
        "run: for i in $(seq 1 600); do sleep 0.1; done\n"
    )
    out = user("jobs", "launch", str(task), "--provider", "sim", "--detach", check=True)
    assert "managed job 1" in out.stderr
    wait_until(lambda: show_job(user)["status"] == "running" or None, 120, "the job to run")
    _kill_server(user)  # while it runs; the preemption (sim time) comes while it is away
    wait_until(lambda: show_job(user)["recoveries"] >= 1 or None, 120, "a recovery")
    recovering = ("recovering", "starting")
    wait_until(lambda: show_job(user)["status"] in recovering or None, 60, "recovering")
    _kill_server(user)  # while it recovers (spot is out for 20 s)
    view = show_job(user)
    assert view["status"] in ("recovering", "starting", "running"), view
    cancelled = json.loads(user("jobs", "cancel", "1", "--json", check=True).stdout)
    assert cancelled["cancel_requested"] is True
    wait_until(lambda: show_job(user)["status"] == "cancelled" or None, 120, "the cancel")

    view = show_job(user)
    attempts = [a["name"] for a in view["attempts"]]
    assert all(a["status"] == "terminated" for a in view["attempts"]), view["attempts"]
    per_cluster = _instances_per_cluster(user)
    assert set(per_cluster) <= set(attempts)
    assert all(count == 1 for count in per_cluster.values()), per_cluster  # no duplicate node
    nodes = LocalProvider(user.home / "sim" / "local")
    assert all(i.state is InstanceState.TERMINATED for i in nodes.list_instances({}))
    queue = user("jobs", "queue", check=True).stdout
    assert "cancelled" in queue and "long" in queue


@pytest.mark.slow
def test_a_failing_task_is_restarted_then_the_job_fails(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "bad.yaml"
    task.write_text(
        "name: bad\nresources:\n  accelerators: T4:1\n"
        "job_recovery:\n  max_restarts_on_errors: 1\nrun: echo boom; exit 3\n"
    )
    out = user("jobs", "launch", str(task), "--provider", "sim")
    assert out.returncode == 1, out.stderr
    assert out.stderr.splitlines()[-1] == (
        "job 1 (bad): attempt bad-1-2 failed in run on node 0, exit code 3 — its output is above"
    )
    view = show_job(user)
    assert view["status"] == "failed" and view["failure"] == "task"
    assert view["restarts"] == 1 and view["attempt"] == 2
    assert "exit code 3" in view["reason"]
    assert view["pricing"] == "on_demand"  # use_spot defaults to false


@pytest.mark.slow
def test_losing_one_node_of_a_two_node_job_recovers_the_job(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "two.yaml"
    task.write_text(
        "name: two\nnum_nodes: 2\nresources:\n  accelerators: T4:1\n"
        "run: for i in $(seq 1 600); do sleep 0.1; done\n"
    )
    first = _launch_running(user, task)
    nodes = LocalProvider(user.home / "sim" / "local")
    ranks = {i.node_rank: i.id for i in nodes.list_instances({TAG_CLUSTER: first})}
    assert sorted(ranks) == [0, 1]
    nodes.terminate([ranks[1]])  # the cloud takes one node, behind gpulease's back

    _wait_recovered(user)
    view = show_job(user)
    assert view["recoveries"] >= 1 and view["attempts"][0]["failure"] == "infra", view
    current = view["attempts"][-1]["name"]
    assert len(nodes.list_instances({TAG_CLUSTER: current})) == 2
    _cancel(user)


@pytest.mark.slow
def test_a_node_whose_agent_stops_answering_is_recovered(user: Cli, tmp_path: Path) -> None:
    """N missed heartbeats (not one) make the node LOST; the job recovers on a fresh attempt."""
    task = tmp_path / "frozen.yaml"
    task.write_text(
        "name: frozen\nresources:\n  accelerators: T4:1\n"
        "run: for i in $(seq 1 600); do sleep 0.1; done\n"
    )
    first = _launch_running(user, task)
    nodes = LocalProvider(user.home / "sim" / "local")
    frozen = [i.id for i in nodes.list_instances({TAG_CLUSTER: first})]
    for pid in node_pids(nodes, frozen):
        # the node is up but its agent answers nothing (a task's `sleep 0.1` may be gone by now)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)

    _wait_recovered(user)
    view = show_job(user)
    lost = next(e for e in view["events"] if e["kind"] == "preemption")
    assert "heartbeats missed" in lost["detail"], view["events"]
    _cancel(user)
    assert node_pids(nodes, frozen) == []  # the frozen node was terminated too
