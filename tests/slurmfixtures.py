"""Slurm fixtures: REAL single-machine Slurm clusters (munged, slurmctld, slurmd daemons), one of
each kind per test session, started here and stopped at the session's end.

- ``slurm_cluster`` (session): ``scripts/dev-slurm.sh start`` in a fresh directory of its own
  (``mkdtemp``) with free ports of its own (slurmctld, one per slurmd) and a random first job id,
  so it never meets another session's cluster, a user's dev cluster or a leftover; yields the path
  of its slurm.conf. At the session's end: every job cancelled, every daemon stopped, checked
  gone, the directory removed.
- ``slurm_env`` (function): ``slurm_cluster`` with ``SLURM_CONF`` set in this process's
  environment for the test only (so it cannot leak into other tests of the same worker, where
  ``SLURM_CONF`` would enable the slurm provider).
- ``slurm_rest_cluster`` (session): another such cluster with JWT auth and slurmrestd on a free
  port (``start --rest``); yields ``SLURM_CONF``, ``SLURM_REST_URL`` and a fresh ``SLURM_JWT``.

Missing packages skip the tests with one line naming the Debian package (``tests/components.py``;
under ``CI=true`` they fail instead); a cluster that does not start with everything installed is
a failure. Slurm tests carry ``@pytest.mark.xdist_group("slurm")`` so one xdist worker runs them
all, and only that worker starts clusters (session fixtures start lazily, where a test needs
them). A session killed before its teardown leaves its daemons behind: the next session stops
those (found through the ``owner.pid`` file each cluster directory holds) before starting its own.

The cluster (``scripts/dev-slurm.sh``): partition ``gpu``, 3 nodes (slurmd daemons on this
machine, all at 127.0.0.1), 4 fake GPUs each.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.components import require, require_root

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev-slurm.sh"
NODES = 3
DIR_PREFIX = "gpulease-slurm-test-"
OWNER_FILE = "owner.pid"
ROOT_WHY = "the dev Slurm cluster runs mknod and SlurmUser=root"
#: ports are drawn below the kernel's ephemeral range (32768-60999 on Linux), so no outgoing
#: connection takes one while the cluster runs, and below 29500, where the agents' derived
#: torch master ports start (``NodeTask.effective_master_port``: 29500-32767)
PORT_RANGE = (20000, 29500)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that nothing listens on now (bound once to check)."""
    rng = random.Random(secrets.randbits(64))
    found: list[int] = []
    while len(found) < count:
        port = rng.randrange(*PORT_RANGE)
        if port in found:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
            except OSError:
                continue
        found.append(port)
    return found


def running_daemons(directory: Path) -> dict[str, int]:
    """The cluster's daemons that run now: pid file name → pid, where that pid runs the daemon
    the file is named for (``/proc/PID/comm``; a reused pid does not count). No Slurm command."""
    found: dict[str, int] = {}
    for pidfile in [*directory.glob("run/*.pid"), directory / "munge" / "munged.pid"]:
        try:
            pid = int(pidfile.read_text().strip())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except (OSError, ValueError):
            continue
        if comm == pidfile.stem.split("-", 1)[0]:
            found[pidfile.stem] = pid
    return found


def _script(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        return subprocess.CompletedProcess(exc.cmd, 124, "", f"{err}\ntimed out after {timeout} s")


def _stop(directory: Path, env: dict[str, str]) -> None:
    """Cancel the cluster's jobs, stop its daemons, check them gone, remove the directory."""
    done = _script(env, "stop", timeout=90)
    left = running_daemons(directory)  # what the script could not stop
    for pid in left.values():
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            continue
    shutil.rmtree(directory, ignore_errors=True)
    if left:
        raise RuntimeError(f"{left} outlived `dev-slurm.sh stop`: {done.stderr[-500:]}")


def _reap_leftovers() -> None:
    """Stop the clusters of sessions that died before their teardown (their owner pid is gone)."""
    for directory in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            _stop(directory, {**os.environ, "GPULEASE_SLURM_DIR": str(directory)})


def _log_tails(directory: Path, lines: int = 8) -> str:
    """The last lines of each daemon's log (read before the directory goes)."""
    parts = []
    for log in sorted(directory.glob("log/*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(parts)


@dataclass
class Cluster:
    """One started dev cluster: its directory, the script's settings, what ``start`` printed."""

    directory: Path
    env: dict[str, str]
    exports: dict[str, str]


def _start(rest: bool) -> Cluster:
    require_root(ROOT_WHY)
    require("slurm-wlm", *(["slurmrestd"] if rest else []))
    _reap_leftovers()
    directory = Path(tempfile.mkdtemp(prefix=DIR_PREFIX))
    (directory / OWNER_FILE).write_text(str(os.getpid()))
    ctld, rest_port, *slurmd = free_ports(2 + NODES)
    env = {
        **os.environ,
        "GPULEASE_SLURM_DIR": str(directory),
        "GPULEASE_SLURM_NODES": str(NODES),
        "GPULEASE_SLURM_PORT": str(ctld),
        "GPULEASE_SLURMD_PORTS": ",".join(map(str, slurmd)),
        "GPULEASE_SLURM_REST_PORT": str(rest_port),
        # distinct job ids across clusters: instance ids (JOB.NODE) never repeat between them
        "GPULEASE_SLURM_FIRST_JOB_ID": str(random.randrange(10_000, 50_000_000)),
    }
    env.pop("SLURM_JWT", None)
    env.pop("SLURM_CONF", None)
    done = _script(env, "start", *(["--rest"] if rest else []), timeout=180)
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in done.stdout.splitlines()
        if line.startswith(("export SLURM_CONF=", "export SLURM_REST_URL="))
    )
    wanted = {"SLURM_CONF", "SLURM_REST_URL"} if rest else {"SLURM_CONF"}
    if done.returncode != 0 or not wanted <= exports.keys():
        logs = _log_tails(directory)
        _stop(directory, env)
        pytest.fail(f"the dev Slurm cluster did not start: {done.stderr.strip()[-1500:]}\n{logs}")
    return Cluster(directory, env, exports)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[str]:
    cluster = _start(rest=False)
    try:
        yield cluster.exports["SLURM_CONF"]
    finally:
        _stop(cluster.directory, cluster.env)


@pytest.fixture
def slurm_env(slurm_cluster: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SLURM_CONF", slurm_cluster)
    return slurm_cluster


def _token(conf: str) -> str:
    argv = ["scontrol", "token", "username=root", "lifespan=3600"]
    env = {**os.environ, "SLURM_CONF": conf}
    try:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("scontrol token did not answer in 30 s")
    if done.returncode != 0 or "=" not in done.stdout:
        pytest.fail(f"scontrol token failed: {done.stderr.strip()[-300:]}")
    return done.stdout.strip().split("=", 1)[1]


@pytest.fixture(scope="session")
def slurm_rest_cluster() -> Iterator[dict[str, str]]:
    """A cluster of its own with JWT auth and slurmrestd (``dev-slurm.sh start --rest``):
    yields ``SLURM_CONF``, ``SLURM_REST_URL`` and a fresh ``SLURM_JWT`` (root, 1 h)."""
    cluster = _start(rest=True)
    try:
        values = {**cluster.exports, "SLURM_JWT": _token(cluster.exports["SLURM_CONF"])}
        yield values
    finally:
        _stop(cluster.directory, cluster.env)
