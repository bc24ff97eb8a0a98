"""The last line of a launch whose task failed: the step, the node, the exit code and how to
read that node's log — for every kind of step the agent reports (pure functions; the real CLI
runs in test_launch_cli.py)."""

from __future__ import annotations

from typing import Any

import pytest

from gpulease.cli.follow import describe_end
from gpulease.cli.jobs_cmd import task_failure_line
from gpulease.server.agents import failed_step


def _failed(**kw: Any) -> dict[str, Any]:
    return {"rank": 0, "state": "FAILED", "step": "run", "exit_code": None, "signal": None,
            "detail": None, **kw}  # fmt: skip


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (_failed(step="setup", exit_code=2, detail="setup exited 2"),
         "in setup on node 0, exit code 2 — see its log: gpulease logs c --rank 0"),
        (_failed(rank=1, exit_code=137, signal="SIGKILL", detail="run exited 137 (SIGKILL)"),
         "in run on node 1, exit code 137 (SIGKILL) — see its log: gpulease logs c --rank 1"),
        (_failed(step="file sync", detail="file sync: workdir /x is not a directory"),
         "in file sync on node 0: workdir /x is not a directory — see its log"),
        (_failed(step="checkpoint restore", detail="checkpoint_store 'x': no such store"),
         "in checkpoint restore on node 0: checkpoint_store 'x': no such store"),
        (_failed(step=None, detail="the agent said no"), "on node 0: the agent said no"),
        (_failed(state="CANCELLED", exit_code=143), "in run on node 0 (cancelled), exit code 143"),
    ],
)  # fmt: skip
def test_the_last_line_names_step_node_code_and_the_log_command(
    failure: dict[str, Any], words: str
) -> None:
    view = {"name": "c", "status": "failed", "reason": "…", "task_failure": failure}
    assert describe_end(view).startswith("c: failed ") and words in describe_end(view)


def test_other_endings_keep_the_reason() -> None:
    view = {"name": "c", "status": "failed", "reason": "node 1 lost", "task_failure": None}
    assert describe_end(view) == "c: failed (node 1 lost)"
    assert describe_end({"name": "c", "status": "succeeded", "reason": "ok"}) == "c: succeeded"


def test_a_failed_jobs_line_names_the_attempt_and_where_its_output_is() -> None:
    attempt = {"name": "j-1-2", "task_failure": _failed(exit_code=3)}
    view = {"id": 1, "name": "j", "status": "failed", "failure": "task", "attempts": [attempt]}
    line = task_failure_line(view)
    assert (
        line
        == "job 1 (j): attempt j-1-2 failed in run on node 0, exit code 3 — its output is above"
    )
    attempt["task_failure"] = _failed(rank=1, exit_code=3)
    assert "node 1's log went with the attempt's nodes" in (task_failure_line(view) or "")
    assert task_failure_line({**view, "failure": "budget"}) is None


def test_the_failed_step_comes_from_the_agents_status() -> None:
    assert failed_step("setup", "setup exited 2") == "setup"
    assert failed_step("run", "run: exit status lost (the agent restarted)") == "run"
    assert failed_step(None, "file sync: workdir /x: gone") == "file sync"
    assert failed_step(None, "task environment: cannot make /v") == "task environment"
    assert failed_step(None, "checkpoint_store 'ftp://x': unknown scheme") == "checkpoint restore"
    assert failed_step(None, "agent error: boom") is None
