"""Slurm fixtures: a REAL single-machine Slurm cluster (munged, slurmctld, slurmd daemons).

- ``slurm_cluster`` (session): runs ``scripts/dev-slurm.sh start`` (installs slurm-wlm + munge
  with apt-get when missing, starts the daemons; a cluster already up is reused) and yields the
  path of its slurm.conf. At the end of the session it runs
  ``scripts/dev-slurm.sh stop`` — only if this session started the cluster. Skipped, with the
  reason, where it cannot start (not root, no apt-get, ...).
- ``slurm_env`` (function): ``slurm_cluster`` with ``SLURM_CONF`` set in this process's
  environment for the test only (so it cannot leak into other tests of the same worker, where
  ``SLURM_CONF`` would enable the slurm provider).

Slurm tests carry ``@pytest.mark.xdist_group("slurm")`` so one xdist worker runs them all.
The cluster (``scripts/dev-slurm.sh``): partition ``gpu``, 3 nodes (slurmd daemons on this
machine, all at 127.0.0.1), 4 fake GPUs each.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev-slurm.sh"


def _already_up(env: dict[str, str]) -> bool:
    status = subprocess.run(
        ["bash", str(SCRIPT), "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return "slurmctld: running" in status.stdout


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("the dev Slurm cluster needs root (mknod, SlurmUser=root, apt-get)")
    env = dict(os.environ)
    was_up = _already_up(env)
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("scripts/dev-slurm.sh start did not finish in 600 s")
    if done.returncode != 0 or not done.stdout.startswith("export SLURM_CONF="):
        pytest.skip(f"the dev Slurm cluster did not start: {done.stderr.strip()[-500:]}")
    yield done.stdout.strip().removeprefix("export SLURM_CONF=")
    if not was_up:
        subprocess.run(
            ["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=60, check=False
        )


@pytest.fixture
def slurm_env(slurm_cluster: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster)
    return slurm_cluster


#: the REST cluster: its own state dir and ports, so it runs beside ``slurm_cluster``
REST_ENV = {
    "GPULEASE_SLURM_DIR": "/tmp/gpulease-slurm-rest",
    "GPULEASE_SLURM_PORT": "16917",
    "GPULEASE_SLURMD_PORT": "16918",
    "GPULEASE_SLURM_REST_PORT": "16980",
}


@pytest.fixture(scope="session")
def slurm_rest_cluster() -> Iterator[dict[str, str]]:
    """``scripts/dev-slurm.sh start --rest`` in /tmp/gpulease-slurm-rest (other ports than the
    default cluster): yields ``SLURM_CONF``, ``SLURM_REST_URL`` and a fresh ``SLURM_JWT`` (root,
    1 h). Stopped at the end only if this session started it."""
    if os.geteuid() != 0:
        pytest.skip("the dev Slurm cluster needs root (mknod, SlurmUser=root, apt-get)")
    env = {**os.environ, **REST_ENV}
    env.pop("SLURM_JWT", None)
    was_up = _already_up(env)
    try:
        done = subprocess.run(
            ["bash", str(SCRIPT), "start", "--rest"], env=env, capture_output=True, text=True,
            timeout=600, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.skip("scripts/dev-slurm.sh start --rest did not finish in 600 s")
    values = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith("export SLURM_CONF=") or line.startswith("export SLURM_REST_URL=")
    )
    if done.returncode != 0 or "SLURM_REST_URL" not in values:
        pytest.skip(f"slurmrestd did not start: {done.stderr.strip()[-500:]}")
    token = subprocess.run(
        ["scontrol", "token", "username=root", "lifespan=3600"],
        env={**env, "SLURM_CONF": values["SLURM_CONF"]}, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    if token.returncode != 0 or "=" not in token.stdout:
        pytest.skip(f"scontrol token failed: {token.stderr.strip()[-300:]}")
    values["SLURM_JWT"] = token.stdout.strip().split("=", 1)[1]
    yield values
    if not was_up:
        subprocess.run(
            ["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=60, check=False
        )
