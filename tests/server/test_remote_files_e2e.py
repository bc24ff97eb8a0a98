"""A task on a provider whose nodes do NOT share this machine's files gets its workdir and file
mounts only through the agent API: the real cluster service and reconcile loop, real SQLite,
real agents started by the real local provider — each in its own mount namespace where the
user's project directory is an empty tmpfs, so the node cannot read the original paths. Root
only (``unshare --mount``; CI runs as root); skipped with the reason otherwise."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpulease.clock import SystemClock
from gpulease.controller import Reconciler
from gpulease.errors import UserInputError
from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from gpulease.server.agents import HttpAgents
from gpulease.server.service import ClusterService
from gpulease.state import make_engine
from tests.dbfixtures import sqlite_template  # noqa: F401 - the fixture
from tests.filesync.trees import build
from tests.providers.procs import node_pids
from tests.server.conftest import task_body
from tests.waiting import wait_until

MB = 1_000_000


def _no_mount_namespace() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs none "$0"', "/tmp"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return None if probe.returncode == 0 else f"no mount namespaces here: {probe.stderr.strip()}"


pytestmark = pytest.mark.skipif(
    _no_mount_namespace() is not None, reason=str(_no_mount_namespace())
)


class RemoteLocalProvider(LocalProvider):
    """The local provider, its nodes playing machines that do not share our files."""

    shares_files = False


def hiding_python(script: Path, hidden: Path) -> str:
    """An interpreter for the agents that first hides ``hidden`` under an empty tmpfs in a
    private mount namespace (same pid and session: the provider still finds every process)."""
    script.write_text(
        "#!/bin/sh\n"
        f'exec unshare --mount --propagation private sh -c \'mount -t tmpfs none "$0" && '
        f'exec "$@"\' {hidden} {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


@pytest.fixture
def world(
    tmp_path: Path,
    sqlite_template: Path,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[ClusterService, Reconciler, RemoteLocalProvider, Path]]:
    monkeypatch.setenv("GPULEASE_HOME", str(tmp_path / "home"))
    hidden = tmp_path / "user"
    hidden.mkdir()
    db = tmp_path / "state.db"
    shutil.copyfile(sqlite_template, db)
    engine: Engine = make_engine(f"sqlite:///{db}")
    python = hiding_python(tmp_path / "python-hiding", hidden)
    provider = RemoteLocalProvider(tmp_path / "local", python=python, kill_grace_s=0.5)
    providers = {"local": provider}
    agents = HttpAgents(providers, secrets.token_bytes(32), file_limit=5 * MB)
    clock = SystemClock()
    owner = f"gl-test-{os.getpid()}"
    service = ClusterService(engine, providers, agents, clock=clock,
                             owner=owner, file_limit=5 * MB)  # fmt: skip
    loop = Reconciler(engine, providers, agents, clock=clock, owner=owner)
    yield service, loop, provider, hidden
    live = [i.id for i in provider.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        provider.terminate(live)
        wait_until(lambda: not node_pids(provider, live) or None, 20, "nodes to die")
        provider.list_instances({})
    agents.close()
    engine.dispose()


def _run_until_done(service: ClusterService, loop: Reconciler, name: str) -> dict[str, object]:
    def done() -> dict[str, object] | None:
        loop.run_pass()
        view = service.get(name)
        return view if view["status"] in ("succeeded", "failed") else None

    return wait_until(done, 90, f"{name} to finish")


def test_the_workdir_and_mounts_reach_the_node_only_through_the_agent(
    world: tuple[ClusterService, Reconciler, RemoteLocalProvider, Path],
) -> None:
    service, loop, _provider, hidden = world
    proj = build(hidden / "proj", {
        "train.py": "print('trained')", "pkg/m.py": "m", ".gitignore": "*.log\n",
        "debug.log": "ignored", ".gpuleaseignore": "scratch/\n", "scratch/tmp": "ignored",
    })  # fmt: skip
    data = build(hidden / "data", {"rows.csv": "1,2"})
    run = ("test -e $PROJ && echo VISIBLE || echo hidden; python train.py; "
           "find . -type f -not -path './checkpoints/*' | sort")  # fmt: skip
    body = task_body(run, name="remote", envs={"PROJ": str(proj)},
                     file_mounts={"inputs": str(data)})  # fmt: skip
    service.launch(body, workdir=str(proj))
    view = _run_until_done(service, loop, "remote")
    assert view["status"] == "succeeded", view
    out = service.logs("remote")[0].data.decode().split()
    assert out == ["hidden", "trained", "./.gitignore", "./.gpuleaseignore", "./inputs/rows.csv",
                   "./pkg/m.py", "./train.py"]  # fmt: skip


def test_a_too_big_workdir_fails_the_launch_up_front(
    world: tuple[ClusterService, Reconciler, RemoteLocalProvider, Path],
) -> None:
    service, _loop, _provider, hidden = world
    big = build(hidden / "big", {"weights.bin": b"x" * 6 * MB})
    with pytest.raises(UserInputError, match=rf"workdir: {big} holds 6.0 MB to send, over the "
                       r"limit of 5.0 MB"):  # fmt: skip
        service.launch(task_body("true", name="big"), workdir=str(big))
    linked = build(hidden / "linked", {"data": "-> /etc"})
    with pytest.raises(UserInputError, match="symbolic links out of it"):
        service.launch(task_body("true", name="linked"), workdir=str(linked))
    assert service.list() == []
