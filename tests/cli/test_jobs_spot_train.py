"""`examples/spot-train.yaml` end to end on the sim provider: a spot-availability trace (made here)
preempts the job twice; each time the agent relays the notice, the training checkpoints and exits
75, the agent uploads the checkpoint, and the jobs loop starts the next attempt, whose agent
restores it before `run`. The job finishes with the same weights as an uninterrupted run from the
same seed, loses no step beyond one checkpoint interval per preemption, and reports its cost
against on-demand. Real server, real agents, real torch processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import ROOT, Cli
from tests.providers.procs import node_pids
from tests.server.conftest import wait_until

EXAMPLE = ROOT / "examples" / "spot-train.yaml"
SAVE_EVERY = 10


def write_trace(path: Path, pattern: list[tuple[int, int]], gap_s: float) -> None:
    """A spot-traces JSON file: ``pattern`` is a list of (value, ticks)."""
    data = [value for value, ticks in pattern for _ in range(ticks)]
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap_s}, "data": data}))


@pytest.fixture
def user(cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    """A home whose sim cloud runs 60× real time (a 60 s tick is 1 s) with spot outages of 3
    ticks after 12 and after 27 ticks (two preemptions of a job that runs ~15 s)."""
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, 12), (0, 3), (1, 12), (0, 3), (1, 600)], gap_s=60)
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 60\n    provision_seconds: [30, 60]\n"
        f"    notice_seconds: 120\n    spot_trace: {trace}\n"
    )
    yield cli
    cli("server", "stop")
    nodes = LocalProvider(cli.home / "sim" / "local", kill_grace_s=0.5)
    live = [i.id for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        nodes.terminate(live)
        wait_until(lambda: not node_pids(nodes, live) or None, 20, "sim nodes to die")


def _task(tmp_path: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["envs"]["WEIGHTS_OUT"] = str(tmp_path / "final.pt")
    data["workdir"] = str(ROOT / "examples" / "train")
    path = tmp_path / "spot-train.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _straight_run(tmp_path: Path) -> Path:
    out = tmp_path / "straight.pt"
    script = ROOT / "examples" / "train" / "train_digits.py"
    args = ["--epochs", "6", "--save-every", str(SAVE_EVERY), "--save-weights", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("torch-ddp")
def test_spot_train_survives_preemptions_with_the_same_weights(user: Cli, tmp_path: Path) -> None:
    import torch

    out = user("jobs", "launch", str(_task(tmp_path)), "--provider", "sim")
    assert out.returncode == 0, out.stderr + out.stdout
    view = json.loads(user("jobs", "show", "1", "--json", check=True).stdout)
    assert view["status"] == "succeeded", view
    assert view["recoveries"] >= 2, view["events"]

    preempted = [int(s) for s in re.findall(r"preempted at step (\d+)", out.stdout)]
    resumed = [int(s) for s in re.findall(r"resumed from step (\d+)", out.stdout)]
    assert len(preempted) >= 2 and len(resumed) >= 2, out.stdout
    for before, after in zip(preempted, resumed, strict=False):
        assert 0 <= before - after <= SAVE_EVERY  # at most one checkpoint interval lost

    cost = view["cost"]
    assert 0 < cost["spent_usd"] < cost["on_demand_equivalent_usd"]
    assert cost["saving_pct"] > 0
    assert "on-demand would have cost" in out.stderr

    expected = torch.load(_straight_run(tmp_path), weights_only=True)
    actual = torch.load(tmp_path / "final.pt", weights_only=True)
    assert expected.keys() == actual.keys()
    for name, tensor in expected.items():
        assert torch.equal(tensor, actual[name]), name

    nodes = LocalProvider(user.home / "sim" / "local")
    assert all(i.state is InstanceState.TERMINATED for i in nodes.list_instances({}))
