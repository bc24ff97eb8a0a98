"""Slurm end to end through the CLI and a real server, against the real daemons that
tests/slurmfixtures.py starts (`scripts/dev-slurm.sh`): the quickstart example runs through
`gpulease launch --provider slurm` (an sbatch allocation, the agent started by srun, the task's
output followed live), and a managed job whose allocation Slurm requeues (a preemption) recovers
on a new allocation and resumes from its checkpoint, ending with the same weights as an
uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpulease.client.server import running
from gpulease.providers.base import TAG_OWNER
from gpulease.providers.slurm.script import parse_comment
from gpulease.storage import LocalStore
from tests.cli.conftest import ROOT, Cli, show_job
from tests.server.conftest import wait_until
from tests.slurmfixtures import slurm_cluster, slurm_env  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]


@pytest.fixture
def user(cli: Cli, slurm_env: str) -> Iterator[Cli]:  # noqa: F811 - fixture
    yield cli  # no providers.slurm section: SLURM_CONF names the cluster
    cli("server", "stop")


def test_the_quickstart_runs_through_slurm(user: Cli) -> None:
    out = user("launch", "examples/quickstart.yaml", "--provider", "slurm", timeout=300)
    assert out.returncode == 0, out.stderr
    assert "test accuracy" in out.stdout
    view = json.loads(user("status", "quickstart", "--json", check=True).stdout)["clusters"][0]
    assert view["provider"] == "slurm" and view["status"] == "succeeded"
    owner = _server_owner(user)
    assert "terminated" in user("down", "quickstart", check=True).stdout
    assert _our_slurm_jobs(owner) == []


LIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "REQUEUED", "SUSPENDED", "COMPLETING"})


def _server_owner(user: Cli) -> str:
    """The owner id of the home's running server: the ``gpulease-owner`` tag of its jobs."""
    found = running(user.home)
    assert found is not None, "the server runs"
    api, _ = found
    with api:
        return str(api.health()["owner"])


def _our_slurm_jobs(owner: str) -> list[dict[str, object]]:
    """The Slurm jobs of the server whose owner id is ``owner`` (the tag in the job's comment)
    that still hold or wait for an allocation (finished ones stay in ``squeue`` for
    ``MinJobAge``)."""
    out = subprocess.run(["squeue", "--json"], capture_output=True, text=True, check=True,
                         timeout=30)  # fmt: skip
    jobs = json.loads(out.stdout)["jobs"]
    return [j for j in jobs if _owner_of(j) == owner and _state(j) & LIVE]


def _owner_of(job: dict[str, object]) -> object:
    parsed = parse_comment(job.get("comment"))
    tags = parsed.get("tags") if parsed else None
    return tags.get(TAG_OWNER) if isinstance(tags, dict) else None


def _state(job: dict[str, object]) -> set[str]:
    state = job.get("job_state")
    return {str(s) for s in state} if isinstance(state, list) else {str(state)}


def test_a_requeued_managed_job_resumes_from_its_checkpoint(user: Cli, tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples" / "spot-train.yaml").read_text())
    data["resources"] = {"providers": ["slurm"], "accelerators": "T4:1"}
    data["workdir"] = str(ROOT / "examples" / "train")
    data["checkpoint"] = {"sync_interval": "1s"}
    data["envs"].update(EPOCHS="10", STEP_DELAY="0.05", WEIGHTS_OUT=str(tmp_path / "final.pt"))
    task = tmp_path / "slurm-train.yaml"
    task.write_text(yaml.safe_dump(data))
    env = {**os.environ, "GPULEASE_HOME": str(user.home), "COLUMNS": "200"}
    follow = subprocess.Popen(
        [sys.executable, "-m", "gpulease", "jobs", "launch", str(task)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        store = user.home / "checkpoints"
        wait_until(lambda: _stored_steps(store) or None, 180, "a checkpoint in the store")
        owner = _server_owner(user)
        (job,) = _our_slurm_jobs(owner)
        requeue = ["scontrol", "requeue", str(job["job_id"])]
        subprocess.run(requeue, check=True, timeout=30)  # Slurm takes the allocation back
        stdout, stderr = follow.communicate(timeout=300)
    finally:
        follow.kill()
    assert follow.returncode == 0, stderr + stdout
    view = show_job(user)
    assert view["status"] == "succeeded" and view["recoveries"] >= 1, view["events"]
    assert "resumed from step" in stdout
    wait_until(lambda: not _our_slurm_jobs(owner) or None, 60, "every allocation to end")

    import torch

    straight = tmp_path / "straight.pt"
    script = ROOT / "examples" / "train" / "train_digits.py"
    args = ["--epochs", "10", "--save-every", "10", "--save-weights", str(straight)]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = torch.load(straight, weights_only=True)
    actual = torch.load(tmp_path / "final.pt", weights_only=True)
    assert all(torch.equal(expected[k], actual[k]) for k in expected)


def _stored_steps(root: Path) -> list[int]:
    return [s for d in root.glob("*") if d.is_dir() for s in LocalStore(d).list_complete()]
