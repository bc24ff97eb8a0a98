"""The job→agent channel on real agent processes: a job under ``gpulease.train`` writes
``GPULEASE_TRAIN_STATS_FILE`` and the agent's samples carry it as ``train`` on
``GET /v1/metrics``; a stale report reads as null; a bad file is ignored with one log line."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpulease.agent.telemetry.train import TRAIN_KEYS
from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until

FAST = ("--metrics-interval", "0.05")

JOB = textwrap.dedent(
    """
    import os
    from gpulease.train import StepTimer, timed_batches, train_stats

    print("stats file", os.environ["GPULEASE_TRAIN_STATS_FILE"])
    print("accelerator", os.environ["GPULEASE_ACCELERATOR"])
    timer = StepTimer(flops_per_sample=2e6, precision="fp16", warmup=1)
    weights = [0.0] * 64
    for step, batch in enumerate(timed_batches([[1.0] * 64 for _ in range(200)])):
        with timer.step(samples=1):
            weights = [w - 0.01 * (w - x) for w, x in zip(weights, batch)]
        if step == 99:
            train_stats().checkpoint(step)
    """
)


def _train_sample(agent: AgentProcess, check: Callable[[Any], bool]) -> Any:
    """The ``train`` of the newest sample whose ``train`` passes ``check``."""

    def found() -> dict[str, Any] | None:
        for sample in reversed(agent.api.metrics()["samples"]):
            if check(sample["train"]):
                return dict(sample)
        return None

    return wait_until(found, what="a sample with the train figures")["train"]


def _passes(agent: AgentProcess, count: int = 5) -> list[Any]:
    """``count`` samples taken after the newest one now (so after any file written before)."""
    since = wait_until(lambda: agent.api.metrics()["samples"], what="a sample")[-1]["at"]
    samples: list[Any] = wait_until(
        lambda: len(s := agent.api.metrics(since)["samples"]) >= count and s, what="passes"
    )
    return samples


def test_a_job_under_gpulease_train_reports_through_the_agent(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    agent = agent_factory(args=FAST)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    agent.api.submit(task("train1", run=f"python {script}", accelerator="T4"))
    assert agent.wait_state("train1", 60)["state"] == "SUCCEEDED", agent.all_logs("train1")
    logs = agent.all_logs("train1")
    stats_file = agent.node_dir.resolve() / "tasks" / "train1" / "train.json"
    assert f"stats file {stats_file}" in logs and "accelerator T4" in logs
    train = _train_sample(agent, lambda t: t is not None and t["step"] == 199)
    assert set(train) == set(TRAIN_KEYS)  # exactly the contract's keys
    assert train["checkpoint_step"] == 99 and train["checkpoint_at"] <= train["updated_at"]
    assert train["step_time_s"] > 0 and train["samples_per_s"] > 0
    assert train["tokens_per_s"] is None  # no tokens counted
    assert 0 < train["mfu"] < 1  # against the rented T4's fp16 peak
    assert 0 <= train["data_wait_ratio"] <= 1


def test_stale_and_bad_files_read_as_null(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    agent = agent_factory(args=FAST)
    agent.api.submit(task("idle", run="sleep 30"))
    wait_until(lambda: agent.api.status("idle")["state"] == "RUNNING", what="running")
    stats_file = agent.node_dir / "tasks" / "idle" / "train.json"
    fresh = {"step": 3, "updated_at": time.time() + 3600}  # fresh for the whole test
    stats_file.write_text(json.dumps(fresh))
    assert _train_sample(agent, lambda t: t is not None)["step"] == 3
    stale = {"step": 4, "updated_at": time.time() - 400}  # > 5 min
    stats_file.write_text(json.dumps(stale))
    assert all(s["train"] is None for s in _passes(agent))
    stats_file.write_text("{not json")
    assert all(s["train"] is None for s in _passes(agent))
    stats_file.write_text(json.dumps({"step": 5, "updated_at": time.time() + 3600, "mfu": 7}))
    assert all(s["train"] is None for s in _passes(agent))
    log = agent.log_path.read_text()
    assert log.count("ignoring the train stats file") == 2  # once per distinct problem
    assert "not JSON" in log and "mfu: expected a share between 0 and 1" in log
    assert "Traceback" not in log
    agent.api.cancel("idle", 1.0)
