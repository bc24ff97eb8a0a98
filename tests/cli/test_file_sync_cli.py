"""Workdirs and file mounts as a user launches them: the real ``gpulease`` entry point, a private
home, the server started in the background, the real local provider. A directory over the size
limit (``file_sync.max_size_mb`` in the config file) or a missing source fails the launch up front
with exit code 2 and a message naming it; ignored files never reach the node; relative mount
sources are taken from the current directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, stop_server_and_nodes
from tests.filesync.trees import build


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text("file_sync:\n  max_size_mb: 1\n")
    yield cli
    stop_server_and_nodes(cli)


def run_in(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEASE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gpulease", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_a_directory_over_the_limit_fails_the_launch_with_exit_2(user: Cli, tmp_path: Path) -> None:
    proj = build(tmp_path / "proj", {"model.bin": b"x" * 1_500_000, "train.py": ""})
    task = tmp_path / "task.yaml"
    task.write_text(f"name: big\nworkdir: {proj}\nresources: {{providers: [local]}}\n"
                    "run: find . -type f | sort\n")  # fmt: skip
    for command in (("launch", str(task)), ("jobs", "launch", str(task))):
        result = user(*command)
        assert result.returncode == 2, (command, result.stderr)
        assert "Traceback" not in result.stderr
        assert f"workdir: {proj} holds 1.5 MB to send, over the limit of 1.0 MB" in result.stderr
    (proj / ".gpuleaseignore").write_text("*.bin\n")  # leaving the weights out makes it fit
    launched = user("launch", str(task))
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.split() == ["./.gpuleaseignore", "./train.py"]


def test_a_missing_mount_fails_up_front_and_relative_mounts_come_from_the_cwd(
    user: Cli, tmp_path: Path
) -> None:
    build(tmp_path / "here", {"data/rows.csv": "1,2", "data/.gitignore": "*.tmp\n",
                              "data/x.tmp": "no"})  # fmt: skip
    task = tmp_path / "here" / "task.yaml"
    task.write_text("name: mounts\nresources: {providers: [local]}\n"
                    "file_mounts: {inputs: ./data, more: ./missing}\nrun: ls inputs\n")  # fmt: skip
    missing = run_in(tmp_path / "here", user.home, "launch", "task.yaml")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "file_mounts more: no such file or directory" in missing.stderr
    assert str(tmp_path / "here" / "missing") in missing.stderr
    task.write_text("name: mounts\nresources: {providers: [local]}\n"
                    "file_mounts: {inputs: ./data}\nrun: ls -A inputs\n")  # fmt: skip
    launched = run_in(tmp_path / "here", user.home, "launch", "task.yaml")
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.split() == [".gitignore", "rows.csv"]
