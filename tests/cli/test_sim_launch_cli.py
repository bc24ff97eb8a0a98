"""The sim provider from the CLI: with a ``providers.sim`` section in the config file, `launch
--provider sim` plans over the catalog's offers as sold by the simulated cloud, waits out the
simulated provisioning delay and runs the task as a real process; `-c` names the cluster; `down`
leaves nothing behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli
from tests.providers.procs import node_pids
from tests.server.conftest import wait_until


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 3600\n    provision_seconds: [60, 120]\n"
    )
    yield cli
    cli("server", "stop")
    nodes = LocalProvider(cli.home / "sim" / "local", kill_grace_s=0.5)
    live = [i.id for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        nodes.terminate(live)
        wait_until(lambda: not node_pids(nodes, live) or None, 20, "sim nodes to die")


@pytest.mark.slow
def test_launch_on_the_sim_provider(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "t4.yaml"
    task.write_text("name: t4job\nresources:\n  accelerators: T4:1\nrun: echo sim-ok\n")
    out = user("launch", str(task), "--provider", "sim", "-c", "simjob")
    assert out.returncode == 0, out.stderr
    assert "launching simjob on sim/" in out.stderr and "sim-ok" in out.stdout
    view = json.loads(user("status", "simjob", "--json", check=True).stdout)["clusters"][0]
    assert view["provider"] == "sim" and view["status"] == "succeeded"
    check = user("check", check=True).stdout
    assert "sim: enabled" in check and "local: enabled" in check
    assert "aws: disabled — no providers.aws section in the config" in check
    shell = user("ssh", "simjob", "--command", 'echo "$NODE_RANK $GPULEASE_NUM_NODES"; pwd')
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines()[0] == "0 1" and "/work" in shell.stdout
    down = user("down", "simjob", check=True)
    assert "simjob: terminated" in down.stdout
    nodes = LocalProvider(user.home / "sim" / "local")
    ids = [p.stem for p in (nodes.root / "instances").glob("*.json")]
    assert ids and node_pids(nodes, ids) == []


@pytest.mark.slow
def test_capacity_error_fails_over_to_the_next_plan(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "t4.yaml"
    task.write_text(
        "name: fo\nresources:\n  accelerators: T4:1\n  providers: [sim]\nrun: echo failed-over\n"
    )
    plans = json.loads(user("plan", str(task), "--json", check=True).stdout)["plans"]
    first = plans[0]
    assert first["provider"] == "sim" and first["launchable"]
    (user.home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 3600\n    provision_seconds: [60, 120]\n"
        f"    no_capacity: [{first['zone'] or first['region']}, {first['region']}]\n"
    )
    out = user("launch", str(task))
    assert out.returncode == 0, out.stderr
    assert "failed-over" in out.stdout
    view = json.loads(user("status", "fo", "--json", check=True).stdout)["clusters"][0]
    history = view["failover_history"]
    assert history and history[0]["region"] == first["region"]
    assert "capacity" in history[0]["error"].lower()
    assert view["region"] != first["region"]
    user("down", "fo", check=True)
