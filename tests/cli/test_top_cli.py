"""``gpulease top`` and the status table's GPU column as a user runs them: the real entry point in
subprocesses, a real server (started on first use) whose relay pulls a local node with two fake
T4s scripted at 30 % and 70 %; and the rendering of the job's figures (what gpulease.train
reports) from a snapshot."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.cli.top_cmd import render
from tests.cli.conftest import Cli, stop_server_and_nodes
from tests.waiting import wait_until

CONFIG = """\
providers:
  local:
    gpus: 2
    accelerator: T4
    gpu_load: [30, 70]
    gpu_memory: 25
server:
  telemetry:
    interval_s: 1
"""


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(CONFIG)
    yield cli
    stop_server_and_nodes(cli)


def _ok(result: subprocess.CompletedProcess[str], code: int = 0) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout + result.stderr


def _snapshot(user: Cli, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_ok(user("top", *args, "--once", "--json")))
    return data


def _sampled(user: Cli) -> dict[str, Any] | None:
    snap = _snapshot(user, "gpus")
    nodes = snap["clusters"][0]["nodes"] if snap["clusters"] else []
    return snap if nodes and nodes[0]["gpus"] else None


@pytest.mark.slow
def test_top_and_status_show_the_fake_gpus_load(user: Cli, tmp_path: Path) -> None:
    task = tmp_path / "gpus.yaml"
    task.write_text("name: gpus\nresources: {providers: [local], accelerators: T4:2}\n"
                    "run: sleep 300\n")  # fmt: skip
    _ok(user("launch", str(task), "-d"))
    wait_until(lambda: "RUNNING" in _ok(user("status", "gpus")), 60, "gpus to run")

    snap = wait_until(lambda: _sampled(user), 30, "the relayed samples")
    (cluster,) = snap["clusters"]
    assert cluster["cluster"] == "gpus" and cluster["gpu_utilization_pct"] == 50.0
    (node,) = cluster["nodes"]
    assert node["node_rank"] == 0 and node["gpu_source"] == "fake"
    assert [g["utilization_pct"] for g in node["gpus"]] == [30.0, 70.0]
    assert all(g["memory_total_mb"] and g["power_limit_w"] for g in node["gpus"])
    assert node["host"]["cpu_count"] and node["train"] is None

    table = _ok(user("top", "--once"))
    assert "gpulease top" in table and "30.0%" in table and "70.0%" in table
    assert "T4" in table and "/70 W" in table  # the T4's power limit from the catalog

    status = _ok(user("status"))
    header, row = status.splitlines()[:2]
    assert "GPU" in header.split() and "50%" in row.split()
    listed = json.loads(_ok(user("status", "--json")))["clusters"]
    assert listed[0]["gpu_utilization_pct"] == 50.0

    _ok(user("stop", "gpus"))
    stopped = json.loads(_ok(user("status", "gpus", "--json")))["clusters"][0]
    assert stopped["status"] in ("stopping", "stopped") and stopped["gpu_utilization_pct"] is None
    assert "no such" not in _ok(user("top", "gpus", "--once"))


@pytest.mark.slow
def test_top_refreshes_until_interrupted_and_names_an_unknown_cluster(user: Cli) -> None:
    assert "no live clusters" in _ok(user("top", "--once"))  # starts the server
    env = {"GPULEASE_HOME": str(user.home), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulease", "top", "--interval", "0.2"],
        env={**os.environ, **env}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: proc.poll() is None and _alive_a_while(proc), 10, "top to refresh")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "Traceback" not in err
    assert "gpulease top" in out

    missing = user("top", "nosuch", "--once")
    assert missing.returncode == 2 and "no cluster named 'nosuch'" in missing.stderr
    assert "Traceback" not in missing.stderr


def _alive_a_while(proc: subprocess.Popen[str]) -> bool:
    try:
        proc.wait(timeout=1.0)  # a crashed top exits at once; a live one is still there
    except subprocess.TimeoutExpired:
        return True
    return False


def test_the_jobs_figures_show_once_per_node() -> None:
    gpu = {"index": 0, "name": "T4", "utilization_pct": 97.0, "memory_used_mb": 8192.0,
           "memory_total_mb": 16384.0, "power_w": 65.0, "power_limit_w": 70.0,
           "temperature_c": 71.0}  # fmt: skip
    train = {"step": 120, "tokens_per_s": 3200.0, "mfu": 0.41, "data_wait_ratio": 0.05}
    snap = {"clusters": [{"cluster": "c", "nodes": [
        {"node_rank": 0, "age_s": 1.0, "gpus": [gpu, {**gpu, "index": 1}], "host": {},
         "train": train},
        {"node_rank": 1, "age_s": 2.0, "gpus": [], "host": {"cpu_pct": 12.0}, "train": None},
    ]}]}  # fmt: skip
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render(snap))
    text = console.export_text()
    assert text.count("step 120 · 3,200 tok/s · MFU 41% · data 5%") == 1
    assert "8.0/16.0 GB" in text and "65/70 W" in text and "71°C" in text
    assert "no GPU (CPU 12%)" in text
