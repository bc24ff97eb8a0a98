"""Task environments (``gpulease.agent.venvs``) with real agent processes: a task's ``setup``
``pip install``s into a venv of its own that sees the agent's packages, never into the agent's
(the test's) environment; agents sharing a venv root make it once, even at the same moment, take
turns for setup, and later tasks with the same setup reuse it."""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Callable
from pathlib import Path

from gpulease.agent import venvs
from tests.agent.conftest import AgentProcess, task, wait_until
from tests.wheels import make_wheel

RUN = (
    "python -c \"import sys, {pkg}; print('value', {pkg}.VALUE); print('prefix', sys.prefix)\"; "
    'echo "venv $VIRTUAL_ENV"'
)


def _own_site_packages() -> set[str]:
    """What the test interpreter's site-packages holds (byte-code caches aside)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    return {p.name for p in purelib.iterdir() if p.name != "__pycache__"}


def _value(log: str, key: str) -> str:
    return next(line.split(" ", 1)[1] for line in log.splitlines() if line.startswith(key + " "))


def _made_count(agents: list[AgentProcess]) -> int:
    return sum(a.log_path.read_text().count("task environment ") for a in agents)


def test_setup_installs_into_one_shared_venv_made_once_not_the_agents(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    pkg = f"gl_tiny_{uuid.uuid4().hex[:8]}"
    wheels = tmp_path / "wheels"
    make_wheel(wheels, pkg, value="from the wheel")
    root = tmp_path / "venvs"
    before = _own_site_packages()
    agents = [agent_factory(f"n{i}", args=("--venv-root", str(root))) for i in range(2)]
    setup = f"pip install --no-index --find-links {wheels} {pkg}"
    for a in agents:  # both at once: they race to make the venv, then take turns for setup
        a.api.submit(task("t1", setup=setup, run=RUN.format(pkg=pkg)))
    logs = []
    for a in agents:
        assert a.wait_state("t1", 60)["state"] == "SUCCEEDED", a.all_logs("t1")
        logs.append(a.all_logs("t1"))

    venv_dirs = {_value(log, "venv") for log in logs}
    assert len(venv_dirs) == 1 and Path(venv_dirs.pop()).parent == root
    assert all(_value(log, "value") == "from the wheel" for log in logs)
    assert {_value(log, "prefix") for log in logs} == {_value(logs[0], "venv")}
    assert sum("Successfully installed" in log for log in logs) == 1, logs
    assert sum("Requirement already satisfied" in log for log in logs) == 1, logs
    assert _made_count(agents) == 1  # one agent made it; the other found it ready
    assert importlib.util.find_spec(pkg) is None  # the agents' (the test's) environment...
    assert _own_site_packages() == before  # ...has no new files


def test_a_later_task_with_the_same_setup_reuses_the_venv_another_setup_gets_its_own(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    pkg = f"gl_tiny_{uuid.uuid4().hex[:8]}"
    wheels = tmp_path / "wheels"
    make_wheel(wheels, pkg)
    root = tmp_path / "venvs"
    setup = f"pip install --no-index --find-links {wheels} {pkg}"
    first = agent_factory("first", args=("--venv-root", str(root)))
    first.api.submit(task("a", setup=setup, run=RUN.format(pkg=pkg)))
    assert first.wait_state("a", 60)["state"] == "SUCCEEDED", first.all_logs("a")
    venv = Path(_value(first.all_logs("a"), "venv"))
    marker = (venv / venvs.READY).stat()

    later = agent_factory("later", args=("--venv-root", str(root)))  # another node, later
    later.api.submit(task("b", setup=setup, run=RUN.format(pkg=pkg)))
    assert later.wait_state("b", 60)["state"] == "SUCCEEDED", later.all_logs("b")
    log = later.all_logs("b")
    assert Path(_value(log, "venv")) == venv and "Requirement already satisfied" in log
    again = (venv / venvs.READY).stat()
    assert (again.st_ino, again.st_mtime_ns) == (marker.st_ino, marker.st_mtime_ns)
    assert _made_count([first, later]) == 1

    later.api.submit(task("c", setup="true", run=RUN.format(pkg=pkg)))
    later.wait_state("c", 30)
    other = later.all_logs("c")  # another setup: another venv, without the package
    assert Path(_value(other, "venv")) != venv and f"No module named '{pkg}'" in other


def test_the_venv_sees_the_agents_packages_and_lends_its_pip_and_torchrun(
    agent: AgentProcess,
) -> None:
    run = (
        "import gpulease, pydantic, sys; print(sys.prefix == sys.base_prefix, sys.prefix)\n"
        "import os; print(os.environ['PATH'].split(':')[:2])"
    )
    script = f"python -c {shlex.quote(run)}; pip --version; python -m pip --version; "
    script += 'head -2 "$(command -v torchrun)"'
    agent.api.submit(task("t", run=script))
    status = agent.wait_state("t", 30)
    out = agent.all_logs("t")
    assert status["state"] == "SUCCEEDED", out
    venv = agent.node_dir / "venvs"  # no --venv-root: inside the node dir
    first, path_line = out.splitlines()[:2]
    assert first.startswith("False ") and Path(first.split()[1]).parent == venv.resolve()
    prefix = first.split()[1]
    assert path_line == str([f"{prefix}/bin", str(Path(sys.executable).parent)])
    pips = [line for line in out.splitlines() if line.startswith("pip ")]
    lent = tuple(f" from {d}/pip " for d in venvs.agent_site_dirs())  # the agent's own pip
    assert len(pips) == 2 and all(any(d in line for d in lent) for line in pips), pips
    assert f"{prefix}/bin/python -m torch.distributed.run" in out


def test_two_processes_making_the_same_venv_make_it_once(tmp_path: Path) -> None:
    path = tmp_path / "venvs" / "k"
    path.mkdir(parents=True)
    (path / "half-made").write_text("an agent died here")  # no ready marker: never used
    code = (
        "import sys; from pathlib import Path; from gpulease.agent import venvs; "
        "print(venvs.ensure(Path(sys.argv[1])))"
    )
    lock = os.open(tmp_path / "venvs" / "k.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # both must wait for it
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    inode = os.fstat(lock).st_ino
    wait_until(lambda: _lock_waiters(inode) == 2, 30, "both to wait for the lock")
    os.close(lock)
    outs = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert outs == ["False", "True"]
    assert not (path / "half-made").exists() and (path / venvs.READY).is_file()
    info = json.loads((path / venvs.READY).read_text())
    assert info["python"] == sys.executable


def test_a_venv_that_cannot_be_made_fails_the_task_saying_so(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    agent = agent_factory(args=("--venv-root", str(not_a_dir)))
    agent.api.submit(task("t", run="echo never"))
    status = agent.wait_state("t", 30)
    assert status["state"] == "FAILED" and status["detail"].startswith("task environment: ")
    assert "never" not in agent.all_logs("t")


def _lock_waiters(inode: int) -> int:
    """How many flock requests wait (``->`` lines in /proc/locks) on the file ``inode``."""
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if "->" in line and line.split()[-3].endswith(f":{inode}"))
