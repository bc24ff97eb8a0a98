"""``gpulease jobs``: managed jobs through the server — ``launch`` (then follow, across
recoveries), ``queue``, ``show`` (the cost report and history), ``logs [-f]`` and ``cancel``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.envs import (
    EnvFileOption,
    EnvOption,
    SecretOption,
    env_overrides,
    secret_overrides,
)
from gpulease.cli.follow import client, say, task_failure_text
from gpulease.cli.launch_cmd import load_for_launch, say_new_warnings
from gpulease.cli.output import console, print_json

if TYPE_CHECKING:
    from gpulease.client import Client

app = typer.Typer(help="Managed jobs: recovered after preemptions and failures until they end.")

JobId = Annotated[int, typer.Argument(help="Job id (see gpulease jobs queue).", min=1)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
FINAL = {"succeeded", "failed", "cancelled"}


@app.command("launch")
def launch(
    task_file: Annotated[Path, typer.Argument(help="Task YAML (gpulease or SkyPilot format).")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Job name.")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", "-p", help="Only this provider (repeatable)."),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Return once launched; do not follow.")
    ] = False,
    as_json: Json = False,
    over_budget: Annotated[
        bool,
        typer.Option("--over-budget", help="Launch although a block budget refuses it."),
    ] = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
    secret: SecretOption = None,
) -> None:
    """Launch a managed job: spot when cheap, on-demand when the deadline needs it, recovered
    from its last checkpoint after every preemption."""
    envs, secrets = env_overrides(env, env_file), secret_overrides(secret)
    task, said = load_for_launch(task_file, provider, envs, secrets)
    with client() as api:
        view = api.job_launch(task, name=name, over_budget=over_budget)
        if not as_json:
            say_new_warnings(view, said)
        if as_json:
            print_json(view)
            return
        say(f"managed job {view['id']} ({view['name']}) launched")
        if detach:
            say(f"follow it with: gpulease jobs logs {view['id']} -f")
            return
        code = follow_job(api, view["id"])
    raise typer.Exit(code)


@app.command("queue")
def queue(
    all_jobs: Annotated[bool, typer.Option("--all/--active", help="Include ended jobs.")] = True,
    as_json: Json = False,
) -> None:
    """Managed jobs: status, attempt, where, recoveries, spend."""
    with client() as api:
        jobs = api.jobs(all_jobs=all_jobs)
    if as_json:
        print_json({"jobs": jobs})
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("ID", "NAME", "STATUS", "ATTEMPT", "WHERE", "PRICING", "RECOVERIES", "SPENT"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            str(job["id"]), job["name"], job["status"], str(job["attempt"]),
            job["where"] or "-", job["pricing"] or "-", str(job["recoveries"]),
            f"${job['cost']['spent_usd']:.2f}",
        )  # fmt: skip
    console().print(table)


@app.command("show")
def show(job_id: JobId, as_json: Json = False) -> None:
    """One job: its cost against on-demand, attempts, events and status history."""
    with client() as api:
        view = api.job(job_id, history=True)
    if as_json:
        print_json(view)
        return
    typer.echo(report(view))


@app.command("logs")
def logs(
    job_id: JobId,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Follow across recoveries.")] = (
        False
    ),
    attempt: Annotated[
        int | None, typer.Option("--attempt", min=1, help="An earlier attempt's output.")
    ] = None,
) -> None:
    """The job's output (of its current attempt unless --attempt)."""
    with client() as api:
        if follow:
            raise typer.Exit(follow_job(api, job_id))
        chunk = api.job_logs(job_id, 0, attempt=attempt)
        offset = 0
        while chunk.data:
            sys.stdout.buffer.write(chunk.data)
            offset = chunk.next_offset
            chunk = api.job_logs(job_id, offset, attempt=attempt)
        sys.stdout.flush()


@app.command("cancel")
def cancel(job_id: JobId, as_json: Json = False) -> None:
    """Cancel a job at any moment: nothing of it keeps running."""
    with client() as api:
        view = api.job_cancel(job_id)
    if as_json:
        print_json(view)
        return
    typer.echo(f"job {view['id']} ({view['name']}): cancel requested ({view['status']})")


def follow_job(api: Client, job_id: int) -> int:
    """Stream the job's output through every attempt; 0 when it succeeded, else 1."""
    out = sys.stdout.buffer
    attempt, offset, status = 0, 0, ""
    while True:
        chunk = api.job_logs(job_id, offset, wait_s=5.0)
        if chunk.job_status != status:
            say(f"job {job_id}: {chunk.job_status}")
            status = chunk.job_status
        if chunk.attempt != attempt:
            if attempt:
                say(f"job {job_id}: attempt {chunk.attempt} (recovered)")
            attempt, offset = chunk.attempt, 0
            continue
        if chunk.data:
            out.write(chunk.data)
            out.flush()
            offset = chunk.next_offset
        if status in FINAL and not chunk.data:
            break
        if not chunk.data:
            time.sleep(0.2)
    view = api.job(job_id)
    say(report(view, brief=True))
    failed = task_failure_line(view)
    if failed:
        say(failed)
    return 0 if view["status"] == "succeeded" else 1


def task_failure_line(view: dict[str, Any]) -> str | None:
    """For a job its task failed: which attempt, step, node and exit code (the last line of
    ``jobs launch``). The attempt's nodes are gone by then, and with them their logs: what was
    followed (node 0's output) is above."""
    if view["status"] != "failed" or view.get("failure") != "task":
        return None
    attempts = [a for a in view["attempts"] if a.get("task_failure")]
    if not attempts:
        return None
    attempt, failed = attempts[-1]["name"], attempts[-1]["task_failure"]
    seen = (
        "its output is above"
        if failed["rank"] == 0
        else f"only node 0's output is shown above; node {failed['rank']}'s log went with the "
        "attempt's nodes"
    )
    head = f"job {view['id']} ({view['name']}): attempt {attempt} failed"
    return f"{head} {task_failure_text(failed)} — {seen}"


def report(view: dict[str, Any], *, brief: bool = False) -> str:
    cost = view["cost"]
    lines = [
        f"job {view['id']} ({view['name']}): {view['status']} — {view['reason']}",
        f"  attempts {view['attempt']}, recoveries {view['recoveries']}, "
        f"restarts {view['restarts']}",
        f"  spent ${cost['spent_usd']:.4f} for {cost['run_hours']:.2f} h of running",
    ]
    if cost["saving_pct"] is not None:
        lines.append(
            f"  on-demand would have cost ${cost['on_demand_equivalent_usd']:.4f} "
            f"(${cost['on_demand_price_per_hour']:.4f}/h): saving {cost['saving_pct']}%"
        )
    if brief:
        return "\n".join(lines)
    if view.get("secrets"):
        lines.append(f"  secrets: {', '.join(view['secrets'])}")
    lines.append("  attempts:")
    for a in view["attempts"]:
        failure = f" ({a['failure']})" if a["failure"] else ""
        lines.append(f"    {a['name']}: {a['status']}{failure} on {a['where']} [{a['pricing']}]")
    lines.append("  events:")
    for e in view["events"]:
        lines.append(f"    {e['kind']}: {e['detail']}")
    for change in view.get("history", []):
        lines.append(f"  {change['from'] or '-'} → {change['to']} by {change['actor']}: "
                     f"{change['reason']}")  # fmt: skip
    return "\n".join(lines)
