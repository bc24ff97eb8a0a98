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
from tests.cli.conftest import ROOT, Cli, configure_sim, stop_server_and_sim_nodes

EXAMPLE = ROOT / "examples" / "spot-train.yaml"
SAVE_EVERY = 10
EPOCHS = 14  # 308 steps of 0.1 s


def write_trace(path: Path, pattern: list[tuple[int, int]], gap_s: float) -> None:
    """A spot-traces JSON file: ``pattern`` is a list of (value, ticks)."""
    data = [value for value, ticks in pattern for _ in range(ticks)]
    path.write_text(json.dumps({"metadata": {"gap_seconds": gap_s}, "data": data}))


@pytest.fixture
def user(cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    """A home whose sim cloud runs 20× real time (a 60 s tick is 3 s, the 120 s notice 6 s) with
    one-tick spot outages after 8 and after 17 ticks (24 s and 51 s): two preemptions of a job
    that trains for ~31 s."""
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, 8), (0, 1), (1, 8), (0, 1), (1, 600)], gap_s=60)
    configure_sim(
        cli,
        "    time_scale: 20\n    provision_seconds: [30, 60]\n"
        f"    notice_seconds: 120\n    spot_trace: {trace}\n",
    )
    yield cli
    stop_server_and_sim_nodes(cli)


def _task(tmp_path: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["envs"].update(
        WEIGHTS_OUT=str(tmp_path / "final.pt"), EPOCHS=str(EPOCHS), STEP_DELAY="0.1"
    )
    data["workdir"] = str(ROOT / "examples" / "train")
    path = tmp_path / "spot-train.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _lost_steps(output: str) -> list[int]:
    """Per resume after a preemption that reached the training loop: steps done before the
    preemption that the resumed attempt does again."""
    lost: list[int] = []
    last: int | None = None
    for kind, step in re.findall(r"(preempted at|resumed from) step (\d+)", output):
        if kind == "preempted at":
            last = int(step)
        elif last is not None:
            lost.append(last - int(step))
            last = None
    return lost


def _straight_run(tmp_path: Path) -> Path:
    out = tmp_path / "straight.pt"
    script = ROOT / "examples" / "train" / "train_digits.py"
    args = ["--epochs", str(EPOCHS), "--save-every", str(SAVE_EVERY), "--save-weights", str(out)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("torch-ddp")
def test_spot_train_survives_preemptions_with_the_same_weights(user: Cli, tmp_path: Path) -> None:
    import torch

    out = user("jobs", "launch", str(_task(tmp_path)), "--provider", "sim", timeout=400)
    assert out.returncode == 0, out.stderr + out.stdout
    view = json.loads(user("jobs", "show", "1", "--json", check=True).stdout)
    assert view["status"] == "succeeded", view
    assert view["recoveries"] >= 2, view["events"]

    assert _lost_steps(out.stdout), out.stdout + out.stderr
    assert max(_lost_steps(out.stdout)) <= SAVE_EVERY  # at most one checkpoint interval each

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
