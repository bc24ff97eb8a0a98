"""Checkpoint-store storage in the cost ledger, end to end on a real server process (local
provider): a managed job's default store (``local://<home>/checkpoints/<task id>``) priced by
the config's ``cost:`` bills its bytes — ``gpulease cost --json`` shows ``storage`` dollars, by
job too, and ``jobs show`` counts them in the job's spend; a bad ``cost:`` value stops the
server at start with one line (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpulease.controller.job_loop import job_task_id
from tests.server.conftest import ROOT, ServerProcess
from tests.waiting import wait_until

CONFIG = """\
providers:
  local:
    gpus: 1
    accelerator: T4
cost:
  storage_usd_per_gb_month: {local: 1000}
  storage_measure_every: 1s
"""


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEASE_HOME": str(home), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "gpulease", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _storage(report: dict[str, Any]) -> float:
    return float(report["total"]["by_kind"].get("storage", 0.0))


def test_a_jobs_checkpoint_store_bills_its_bytes(server: ServerProcess, home: Path) -> None:
    (home / "config.yaml").write_text(CONFIG)
    step = home / "checkpoints" / job_task_id("kept", 1) / "step-1"  # job 1's default store
    step.mkdir(parents=True)
    with open(step / "model.pt", "wb") as handle:  # 10 GB, sparse: its size is what is billed
        handle.truncate(10_000_000_000)
    api = server.start().api
    task = {"name": "kept", "run": "sleep 600",
            "resources": {"providers": ["local"], "accelerators": "T4:1"}}  # fmt: skip
    job = api.job_launch(task, name="kept")
    assert api.job(job["id"])["checkpoint_store"] == f"local://{step.parent}"
    by_job = wait_until(lambda: (r := api.cost(by="job")) and _storage(r) > 0 and r, 30,
                        "storage dollars in the report")  # fmt: skip
    assert [g["key"] for g in by_job["breakdown"]] == [str(job["id"])]
    out = _cli(home, "cost", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert _storage(report) >= _storage(by_job) > 0
    assert report["total"]["cost_usd"] >= _storage(report)
    spent = api.job(job["id"])["cost"]["spent_usd"]
    assert spent >= round(_storage(by_job), 4) > 0
    api.job_cancel(job["id"])


def test_a_bad_cost_value_stops_the_server_at_start_with_exit_2(home: Path) -> None:
    (home / "config.yaml").write_text("cost:\n  storage_usd_per_gb_month: {s3: cheap}\n")
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    out = subprocess.run([sys.executable, "-m", "gpulease.server", "run", "--port", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "error: cost.storage_usd_per_gb_month.s3: " in out.stderr
    assert "Traceback" not in out.stderr
