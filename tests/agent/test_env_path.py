"""Jobs find their task venv, then gpulease's own Python environment, first on PATH (python, pip,
torchrun)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from gpulease.agent.env import job_env
from gpulease.wire import NodeTask


def test_the_agents_python_comes_first_on_path(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    base = {"PATH": os.pathsep.join(["/usr/bin", bin_dir, "/bin"])}
    env = job_env(
        base,
        NodeTask(task_id="t", run="true"),
        work_dir=tmp_path,
        checkpoint_dir=tmp_path,
        preemption_file=tmp_path / "p",
    )
    assert env["PATH"].split(os.pathsep) == [bin_dir, "/usr/bin", "/bin"]


def test_a_task_may_still_set_its_own_path(tmp_path: Path) -> None:
    sub = NodeTask(task_id="t", run="true", envs={"PATH": "/opt/custom/bin"})
    env = job_env(
        {"PATH": "/usr/bin"},
        sub,
        work_dir=tmp_path,
        checkpoint_dir=tmp_path,
        preemption_file=tmp_path / "p",
    )
    assert env["PATH"] == "/opt/custom/bin"


def test_the_task_venv_comes_first_then_the_agents_python(tmp_path: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    venv = tmp_path / "venvs" / "k"
    env = job_env(
        {"PATH": os.pathsep.join(["/usr/bin", bin_dir]), "PYTHONHOME": "/elsewhere"},
        NodeTask(task_id="t", run="true"),
        work_dir=tmp_path,
        checkpoint_dir=tmp_path,
        preemption_file=tmp_path / "p",
        venv=venv,
    )
    assert env["PATH"].split(os.pathsep) == [str(venv / "bin"), bin_dir, "/usr/bin"]
    assert env["VIRTUAL_ENV"] == str(venv) and "PYTHONHOME" not in env
