"""Budgets end to end on a real server process (local provider, its make-believe
``price_per_gpu_hour``): a ``block`` budget refuses a launch by name (the CLI exits 2) and
``--over-budget`` launches anyway; a ``stop`` budget stops a running cluster; a managed job of a
``stop`` budget's scope checkpoints, stops and fails ``budget``; ``gpulease status`` shows a line
per budget; a bad entry stops the server at start (exit 2).

The first test seeds its spend as ledger rows through the real schema into the server's own state
DB (exact figures in the messages); the last lets the ledger's real accrual (branch i16-ledger,
merged) of a $1/s local cluster pass a `stop` budget. The budgets loop reads the ledger on its
next pass (every 5 s)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpulease.client.errors import InvalidRequest
from gpulease.state import make_engine
from tests.cost.ledger_rows import seed_row
from tests.server.conftest import ROOT, ServerProcess
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

CONFIG = """\
providers:
  local:
    gpus: 2
    accelerator: T4
    price_per_gpu_hour: 1.0
budgets:
  - {name: gate, period: month, limit: 5, scope: {task: "blocked*"}, action: block}
  - {name: cap, period: month, limit: 5, scope: {task: "stopme*"}, action: stop}
  - {name: jobs-cap, period: day, limit: 5, scope: {task: "capjob*"}, action: stop}
"""


def _task(name: str, run: str = "sleep 600") -> dict[str, Any]:
    return {"name": name, "run": run, "resources": {"providers": ["local"], "accelerators": "T4:1"}}


def _spend(home: Path, task_name: str, dollars: float) -> None:
    engine = make_engine(f"sqlite:///{home / 'state.db'}")
    try:
        now = time.time()
        seed_row(engine, started_at=now - 60, ended_at=now - 30, cost_usd=dollars,
                 task_name=task_name)  # fmt: skip
    finally:
        engine.dispose()


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEASE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gpulease", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def test_block_refuses_by_name_and_stop_stops_clusters_and_jobs(
    server: ServerProcess, home: Path, tmp_path: Path
) -> None:
    (home / "config.yaml").write_text(CONFIG)
    api = server.start().api
    _spend(home, "blocked-1", 6.0)
    task_file = tmp_path / "blocked.yaml"
    task_file.write_text("name: blocked-1\nresources:\n  accelerators: T4:1\nrun: sleep 600\n")
    out = _cli(home, "launch", str(task_file), "-d", "--provider", "local")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "budget gate (month) has spent $6.00 of its $5.00 limit" in out.stderr
    assert "Traceback" not in out.stderr
    with pytest.raises(InvalidRequest, match="budget gate"):
        api.launch(_task("blocked-1"))
    assert api.launch(_task("blocked-1"), over_budget=True)["name"] == "blocked-1"
    api.down("blocked-1")

    api.launch(_task("stopme"))
    job = api.job_launch(
        _task(
            "capjob",
            "trap 'echo checkpoint taken; exit 75' TERM\n"
            "for i in $(seq 1 6000); do sleep 0.1; done\n",
        )
    )
    server.wait_status("stopme", {"running"}, timeout=60)
    wait_until(lambda: api.job(job["id"])["status"] == "running" or None, 60, "the job to run")
    _spend(home, "stopme", 6.0)
    _spend(home, "capjob", 7.5)

    stopped = server.wait_status("stopme", {"stopping", "stopped"}, timeout=30)
    assert stopped["reason"] == "budget cap: $6.00 of $5.00"
    failed = wait_until(lambda: (v := api.job(job["id"]))["status"] == "failed" and v, 60,
                        "the job to stop")  # fmt: skip
    assert failed["failure"] == "budget", failed
    assert failed["reason"] == "budget jobs-cap: $7.50 of $5.00; stopped with a checkpoint"
    status = _cli(home, "status")
    assert "budget cap (month): $6.00 / $5.00 (120 %), stop" in status.stdout, status.stdout
    lines = {b["name"]: b["line"] for b in api.budgets()}
    assert lines["gate"] == "gate (month): $6.00 / $5.00 (120 %), block"


def test_a_bad_budget_stops_the_server_at_start_with_exit_2(home: Path) -> None:
    (home / "config.yaml").write_text("budgets:\n  - {name: b, period: month, limit: -5}\n")
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "gpulease.server", "run", "--port", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "error: budgets[0].limit: Input should be greater than 0" in out.stderr
    assert "Traceback" not in out.stderr


BURNING = """\
providers:
  local:
    gpus: 1
    accelerator: T4
    price_per_gpu_hour: 3600.0
budgets:
  - {name: burn, period: day, limit: 2, warn_at: 0.5, scope: {task: "burner"}, action: stop}
"""


def test_a_stop_budget_stops_a_cluster_on_its_real_accrual(
    server: ServerProcess, home: Path
) -> None:
    """No seeded rows: the ledger's accrual of a $1/s cluster passes the $2 limit in seconds."""
    (home / "config.yaml").write_text(BURNING)
    api = server.start().api
    api.launch(_task("burner"))
    server.wait_status("burner", {"stopping", "stopped"}, timeout=60)
    # the move to stopping is the budget's (the cluster may be stopped by the time we look)
    history = api.cluster("burner", history=True)["history"]
    reason = next(c["reason"] for c in history if c["to"] == "stopping")
    assert reason.startswith("budget burn: $") and reason.endswith(" of $2.00"), reason
    assert float(reason.split("$")[1].split()[0]) >= 2.0
    (state,) = api.budgets()
    assert state["spend"] >= 2.0 and state["action"] == "stop"
