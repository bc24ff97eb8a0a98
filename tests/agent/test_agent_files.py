"""The workdir is copied into the node's work dir (without .git, .venv, __pycache__ and what
.gitignore / .gpuleaseignore ignore); file mounts land where asked; exec runs in the task's
directory and environment, with a timeout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpulease.agent.client import AgentRequestError
from tests.agent.conftest import AgentProcess, task


def _project(root: Path) -> Path:
    for rel in ("train.py", "pkg/mod.py", ".git/HEAD", ".venv/bin/python", "pkg/__pycache__/x.pyc"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    return root


def test_workdir_is_synced_without_vcs_and_caches(agent: AgentProcess, tmp_path: Path) -> None:
    project = _project(tmp_path / "project")
    agent.api.submit(task(workdir=str(project), run="find . -type f | sort"))
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED"
    assert agent.all_logs("t1").split() == ["./pkg/mod.py", "./train.py"]
    assert [h["state"] for h in status["history"]][:2] == ["PENDING", "SETTING_UP"]


def test_the_local_copy_honours_gitignore_and_gpuleaseignore(
    agent: AgentProcess, tmp_path: Path
) -> None:
    project = _project(tmp_path / "project")
    for rel, text in {".gitignore": "*.log\nout/\n", "pkg/.gitignore": "local.py\n",
                      ".gpuleaseignore": "big/\n!keep.log\n", "a.log": "", "keep.log": "",
                      "out/x": "", "pkg/local.py": "", "big/w.bin": ""}.items():  # fmt: skip
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    data = tmp_path / "data"
    (data / "tmp").mkdir(parents=True)
    (data / "rows.csv").write_text("1")
    (data / "tmp" / "x").write_text("")
    (data / ".gitignore").write_text("tmp/\n")
    agent.api.submit(task(workdir=str(project), file_mounts={"d": str(data)},
                          run="find . -type f -not -path './checkpoints/*' | sort"))  # fmt: skip
    assert agent.wait_state("t1")["state"] == "SUCCEEDED"
    assert agent.all_logs("t1").split() == [
        "./.gitignore", "./.gpuleaseignore", "./d/.gitignore", "./d/rows.csv", "./keep.log",
        "./pkg/.gitignore", "./pkg/mod.py", "./train.py",
    ]  # fmt: skip


def test_file_mounts_copy_files_and_directories(agent: AgentProcess, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("A")
    config = tmp_path / "config.yaml"
    config.write_text("lr: 1")
    target = tmp_path / "elsewhere" / "cfg.yaml"
    mounts = {"datasets/d": str(data), str(target): str(config)}
    agent.api.submit(task(file_mounts=mounts, run="cat datasets/d/a.txt"))
    assert agent.wait_state("t1")["state"] == "SUCCEEDED"
    assert agent.all_logs("t1") == "A"
    assert target.read_text() == "lr: 1"


def test_exec_runs_in_the_task_directory_and_environment(agent: AgentProcess) -> None:
    agent.api.submit(task("job-1", run="true", envs={"FOO": "bar"}))
    agent.wait_state("job-1")
    result = agent.api.exec("job-1", 'pwd; echo "$FOO $GPULEASE_TASK_ID"; exit 4')
    assert result.exit_code == 4 and not result.timed_out
    assert result.output.splitlines() == [str(agent.node_dir / "work"), "bar job-1"]


def test_exec_is_killed_at_its_timeout(agent: AgentProcess) -> None:
    agent.api.submit(task(run="true"))
    agent.wait_state("t1")
    started = time.monotonic()
    result = agent.api.exec("t1", "echo started; sleep 30", timeout_s=0.3)
    assert result.timed_out and result.exit_code is None
    assert result.output == "started\n"
    assert time.monotonic() - started < 3


def test_exec_on_an_unknown_task_is_404(shared_agent: AgentProcess) -> None:
    with pytest.raises(AgentRequestError) as err:
        shared_agent.api.exec("nope", "true")
    assert err.value.status == 404
