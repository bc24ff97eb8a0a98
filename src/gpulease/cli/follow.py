"""Following a cluster from the CLI: connecting (and saying when a server had to be started),
printing status changes, streaming the task's output live, and turning the outcome into the
task's exit status. Shared by ``launch`` and ``logs -f``."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from gpulease.client import Client

RESTING = {"succeeded", "failed", "stopped", "terminated"}
NO_LOGS = {"failed", "stopped", "stopping", "terminating", "terminated"}


def client() -> Client:
    from gpulease.client import connect

    def started(pid: int, port: int) -> None:
        typer.echo(f"started gpulease server (pid {pid}, port {port})", err=True)

    return connect(on_start=started)


def say(message: str) -> None:
    typer.echo(message, err=True)


def follow(api: Client, name: str, *, rank: int = 0, progress: bool = False) -> int:
    """Print the task's output on node ``rank`` as it comes; the task's exit status."""
    offset, status = 0, ""
    out = sys.stdout.buffer
    while True:
        chunk = api.logs(name, offset, rank=rank, wait_s=5.0)
        if progress and chunk.cluster_status != status:
            say(f"{name}: {chunk.cluster_status.replace('_', ' ')}")
        status = chunk.cluster_status
        if chunk.data:
            out.write(chunk.data)
            out.flush()
            offset = chunk.next_offset
        if chunk.complete or (not chunk.data and status in NO_LOGS):
            break
    return outcome(api, name, progress=progress)


def outcome(api: Client, name: str, *, progress: bool, wait_s: float = 15.0) -> int:
    """Wait (briefly) for the cluster to rest, then its exit status: 0 when it succeeded, the
    task's exit code when it failed (1 when there is none)."""
    deadline = time.monotonic() + wait_s
    view = api.cluster(name)
    while view["status"] not in RESTING and time.monotonic() < deadline:
        time.sleep(0.2)
        view = api.cluster(name)
    if progress:
        say(describe_end(view))
    if view["status"] == "succeeded":
        return 0
    code = view.get("exit_code")
    return int(code) if code else 1


def describe_end(view: dict[str, Any]) -> str:
    """The last line of a followed launch: the cluster's status, and for a task that failed,
    where (step, node, exit code) and how to read that node's log."""
    status = view["status"]
    line = f"{view['name']}: {status}"
    failed = view.get("task_failure") if status == "failed" else None
    if failed:
        rank = failed["rank"]
        how = f"gpulease logs {view['name']} --rank {rank}"
        return f"{line} {task_failure_text(failed)} — see its log: {how}"
    if status != "succeeded" and view.get("reason"):
        line += f" ({view['reason']})"
    return line


def task_failure_text(failed: dict[str, Any]) -> str:
    """``in setup on node 0, exit code 2``: where a task failed (a cluster view's
    ``task_failure``), with the agent's detail when there is no exit code to show."""
    step, code, detail = failed.get("step"), failed.get("exit_code"), failed.get("detail") or ""
    text = (f"in {step} " if step else "") + f"on node {failed['rank']}"
    if failed.get("state") == "CANCELLED":
        text += " (cancelled)"
    if code is not None:
        text += f", exit code {code}"
        return text + (f" ({failed['signal']})" if failed.get("signal") else "")
    if step and detail.startswith(f"{step}: "):
        detail = detail[len(step) + 2 :]
    return text + (f": {detail}" if detail else "")
