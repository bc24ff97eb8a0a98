"""Preemption notices and cancels reach the job's process group: the preemption file first, then
SIGTERM, then SIGKILL once the grace period is over."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until


def _pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


def test_a_preempted_job_that_checkpoints_and_exits_75_is_preempted(
    agent: AgentProcess,
) -> None:
    run = (
        'on_term() { test -e "$GPULEASE_PREEMPTION_FILE" && echo notice-seen; '
        "echo checkpoint saved; exit 75; }; trap on_term TERM; echo training; "
        "while true; do sleep 0.02; done"
    )
    agent.api.submit(task(run=run))
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    agent.api.preempt("t1", grace_s=5.0)
    status = agent.wait_state("t1")
    assert (status["state"], status["exit_code"]) == ("PREEMPTED", 75)
    assert status["stop_requested"] == "preempt"
    lines = agent.all_logs("t1").splitlines()  # bash may add "Terminated" for the sleep
    assert lines[0] == "training" and lines[-2:] == ["notice-seen", "checkpoint saved"]


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(
    agent: AgentProcess, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    # the script and a child both ignore TERM; the whole group must still go
    run = f"trap '' TERM; sleep 60 & echo $$ $! > {pids}; wait"
    agent.api.submit(task(run=run))
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, what="pids")
    started = time.monotonic()
    agent.api.cancel("t1", grace_s=0.5)
    status = agent.wait_state("t1")
    elapsed = time.monotonic() - started
    assert status["state"] == "CANCELLED"
    assert (status["exit_code"], status["signal"]) == (137, "SIGKILL")
    assert 0.5 <= elapsed < 3.0
    for pid in map(int, pids.read_text().split()):
        wait_until(functools.partial(_pid_gone, pid), 2.0, f"pid {pid} to exit")


def test_a_job_that_traps_sigterm_exits_within_the_grace(agent: AgentProcess) -> None:
    run = "trap 'echo cleaning up; exit 0' TERM; echo up; while true; do sleep 0.02; done"
    agent.api.submit(task(run=run))
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    started = time.monotonic()
    agent.api.cancel("t1", grace_s=10.0)
    status = agent.wait_state("t1")
    assert time.monotonic() - started < 2.0  # did not wait for the grace
    assert status["state"] == "CANCELLED" and status["signal"] is None
    lines = agent.all_logs("t1").splitlines()
    assert lines[0] == "up" and lines[-1] == "cleaning up"


def test_a_preemption_notice_to_a_job_without_handler_is_still_preempted(
    agent: AgentProcess,
) -> None:
    agent.api.submit(task(run="echo up; sleep 60"))
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    agent.api.preempt("t1", grace_s=1.0)
    status = agent.wait_state("t1")
    assert status["state"] == "PREEMPTED" and status["signal"] == "SIGTERM"
    assert Path(agent.node_dir / "tasks" / "t1" / "preempted").exists()


def test_stop_requests_during_setup_skip_the_run(agent: AgentProcess, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    agent.api.submit(task(setup="echo setup; sleep 60", run=f"touch {marker}"))
    wait_until(lambda: agent.api.logs("t1").data, what="setup to start")
    agent.api.preempt("t1", grace_s=0.2)
    status = agent.wait_state("t1")
    assert status["state"] == "PREEMPTED" and status["phase"] == "setup"
    assert not marker.exists()


def test_stopping_a_finished_task_changes_nothing(agent: AgentProcess) -> None:
    agent.api.submit(task(run="true"))
    agent.wait_state("t1")
    assert agent.api.cancel("t1")["state"] == "SUCCEEDED"
    assert os.path.exists(agent.node_dir / "tasks" / "t1" / "task.json")


def test_a_job_signalled_with_its_node_is_not_reported_failed(agent: AgentProcess) -> None:
    """The node going away (an instance terminated: SIGTERM to every process of the agent's
    session at once) kills the job too; the agent, told to stop by the same signal, must not
    record the job's signal death as the task failing — the server then sees a lost node and
    recovers the job, where a FAILED task would end it."""
    from gpulease.agent.state import load_record

    agent.api.submit(task(run="echo started\nsleep 30\necho never"))  # bash forks: two signals
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    assert agent.proc is not None
    session = agent.proc.pid
    for pid in [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getsid(pid) == session:  # the agent and every group of its jobs
                os.kill(pid, signal.SIGTERM)
    agent.proc.wait(15)
    record = load_record(agent.node_dir / "tasks" / "t1" / "task.json")
    assert record.state.value == "RUNNING", (record.state, record.exit_code, record.signal)
