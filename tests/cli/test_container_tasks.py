"""Tasks in a container image end to end, as a user runs them: the real ``gpulease`` entry point,
a private home, the server started on first use, real agents driving a real Podman, an image
with Debian's Python, torch, scikit-learn and gpulease baked in (built on this machine:
``tests/images.py``; no registry is reachable here).

- the quickstart in the image trains to its accuracy line on the local provider; ``exec`` and
  ``ssh --command`` run inside its container; ``down`` leaves no container behind;
- the 2-node DDP example runs with both nodes in containers (host networking, torchrun's
  rendezvous from the variables gpulease sets);
- a managed spot job in the image survives a preemption on sim: the notice reaches the training
  inside the container as SIGTERM, it checkpoints and exits 75, the next attempt restores the
  checkpoint and finishes.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpulease.agent.containers import ContainerEngine, run_engine
from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import (
    ROOT,
    Cli,
    configure_sim,
    stop_server_and_nodes,
    stop_server_and_sim_nodes,
)
from tests.cli.test_jobs_spot_train import write_trace

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("torch-ddp")]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def podman_user(cli: Cli, podman_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """A user whose server (and so its local agents) drive this session's Podman."""
    for name, value in podman_env.items():
        monkeypatch.setenv(name, value)
    return cli


@pytest.fixture
def local_user(podman_user: Cli) -> Iterator[Cli]:
    yield podman_user
    stop_server_and_nodes(podman_user)


@pytest.fixture
def sim_user(podman_user: Cli, tmp_path: Path) -> Iterator[Cli]:
    """The sim cloud at 20× real time with one spot outage after 5 ticks (15 s)."""
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, 5), (0, 1), (1, 600)], gap_s=60)
    configure_sim(
        podman_user,
        "    time_scale: 20\n    provision_seconds: [30, 60]\n"
        f"    notice_seconds: 120\n    spot_trace: {trace}\n",
    )
    yield podman_user
    stop_server_and_sim_nodes(podman_user)


def _in_image(example: str, image: str, tmp_path: Path, **changes: object) -> Path:
    """``examples/EXAMPLE`` with ``resources.image_id`` set (and ``changes``), as a file."""
    data = yaml.safe_load((EXAMPLES / example).read_text())
    data.setdefault("resources", {})["image_id"] = f"docker:{image}"
    data["workdir"] = str(EXAMPLES / "train")
    data.update(changes)
    path = tmp_path / example
    path.write_text(yaml.safe_dump(data))
    return path


def _ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def _gpulease_containers(engine: ContainerEngine, home: Path) -> list[str]:
    """The containers the agents of nodes under ``home`` started (their ``gpulease.node``)."""
    done = run_engine(engine, engine.argv("ps", "--all", "--format", "json"))
    assert done.returncode == 0, done.stderr
    return [c["Names"][0] for c in json.loads(done.stdout or "[]")
            if (c.get("Labels") or {}).get("gpulease.node", "").startswith(str(home))]  # fmt: skip


def test_the_quickstart_trains_in_the_image_and_exec_and_ssh_run_inside(
    local_user: Cli, torch_image: str, podman_engine: ContainerEngine, tmp_path: Path
) -> None:
    run = 'echo "in $GPULEASE_CONTAINER"; python train_digits.py --epochs 15 --onnx off'
    task = _in_image("quickstart.yaml", torch_image, tmp_path, run=run)
    out = _ok(local_user("launch", str(task), timeout=300))
    assert re.search(r"test accuracy \d", out), out
    assert "in gpulease-" in out
    baked = "/usr/local/lib/python3.11/dist-packages/torch"  # the image's, not this machine's
    assert not Path(baked).exists()
    inside = _ok(local_user("exec", "quickstart", f"test -d {baked} && echo image"))
    assert inside.strip() == "image"
    shell = _ok(local_user("ssh", "quickstart", "--command", 'echo "$GPULEASE_CONTAINER"; pwd'))
    name, cwd = shell.split()
    assert name.startswith("gpulease-") and Path(cwd).name == "work"
    _ok(local_user("down", "quickstart"))
    assert _gpulease_containers(podman_engine, local_user.home) == []


def test_the_two_node_ddp_example_runs_with_both_nodes_in_containers(
    local_user: Cli, torch_image: str, podman_engine: ContainerEngine, tmp_path: Path
) -> None:
    task = _in_image("ddp-2node.yaml", torch_image, tmp_path)
    out = _ok(local_user("launch", str(task), timeout=400))
    assert re.search(r"test accuracy \d", out), out
    probe = 'echo "$NODE_RANK $GPULEASE_CONTAINER"'
    seen = [_ok(local_user("exec", "ddp-2node", probe, "--rank", r)).split() for r in ("0", "1")]
    assert [rank for rank, _ in seen] == ["0", "1"], seen
    assert seen[0][1] != seen[1][1] and all(n.startswith("gpulease-") for _, n in seen), seen
    _ok(local_user("down", "ddp-2node"))
    assert _gpulease_containers(podman_engine, local_user.home) == []


def test_a_managed_spot_job_in_the_image_survives_a_preemption(
    sim_user: Cli, torch_image: str, podman_engine: ContainerEngine, tmp_path: Path
) -> None:
    data = yaml.safe_load((EXAMPLES / "spot-train.yaml").read_text())
    envs = {**data["envs"], "EPOCHS": "8", "STEP_DELAY": "0.1", "WEIGHTS_OUT": "final.pt"}
    task = _in_image("spot-train.yaml", torch_image, tmp_path, envs=envs)
    out = sim_user("jobs", "launch", str(task), "--provider", "sim", timeout=400)
    assert out.returncode == 0, out.stderr + out.stdout
    view = json.loads(_ok(sim_user("jobs", "show", "1", "--json")))
    assert view["status"] == "succeeded", view
    assert view["recoveries"] >= 1, view["events"]
    resumed = [int(s) for s in re.findall(r"resumed from step (\d+)", out.stdout)]
    assert resumed and max(resumed) > 0, out.stdout
    assert "preempted at step" in out.stdout
    nodes = LocalProvider(sim_user.home / "sim" / "local")
    assert all(i.state is InstanceState.TERMINATED for i in nodes.list_instances({}))
    assert _gpulease_containers(podman_engine, sim_user.home) == []
