"""``gpulease serve``: services through the server — ``up SERVICE.yaml`` (replicas behind an
endpoint on the server's host), ``status [NAME] [--json]`` (endpoint, replicas, load, cost,
scaling decisions), ``logs NAME [--replica I] [-f]``, ``update NAME SERVICE.yaml`` (rolling) and
``down NAME``. A task file without a ``service:`` section, or with a bad one, exits 2 naming the
field, and nothing is created."""

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
from gpulease.cli.follow import client, say
from gpulease.cli.launch_cmd import load_for_launch, say_new_warnings
from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.spec import Task

app = typer.Typer(help="Services: replicas behind a load balancer, scaled by load.")

Name = Annotated[str, typer.Argument(help="Service name (see gpulease serve status).")]
TaskFile = Annotated[Path, typer.Argument(help="Task YAML with a service: section.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Providers = Annotated[
    list[str] | None, typer.Option("--provider", "-p", help="Only this provider (repeatable).")
]


def _load(
    task_file: Path, provider: list[str] | None, envs: list[str] | None,
    env_file: Path | None, secrets: list[str] | None,
) -> tuple[Task, list[str]]:  # fmt: skip
    """The task with ``--env``, ``--env-file`` and ``--secret``, and the warnings said."""
    task, said = load_for_launch(
        task_file, provider, env_overrides(envs, env_file), secret_overrides(secrets)
    )
    if task.service is None:
        raise UserInputError(
            f"service: {task_file} has no service: section (a service needs at least "
            "service: {port: ..., readiness_probe: ...}; see docs/serving.md)"
        )
    return task, said


@app.command("up")
def up(
    task_file: TaskFile,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Service name.")] = None,
    provider: Providers = None,
    as_json: Json = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
    secret: SecretOption = None,
) -> None:
    """Start a service: its replicas, and its endpoint on the server's host."""
    task, said = _load(task_file, provider, env, env_file, secret)
    with client() as api:
        view = api.serve_up(task, name=name)
    if as_json:
        print_json(view)
        return
    say_new_warnings(view, said)
    say(f"service {view['name']}: {view['status']}; endpoint {view['endpoint']}")
    say(f"watch it with: gpulease serve status {view['name']}")


@app.command("update")
def update(
    name: Name,
    task_file: TaskFile,
    provider: Providers = None,
    as_json: Json = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
    secret: SecretOption = None,
) -> None:
    """Roll the service to a new task: new replicas become ready before old ones drain."""
    task, said = _load(task_file, provider, env, env_file, secret)
    with client() as api:
        view = api.serve_update(name, task)
    if as_json:
        print_json(view)
        return
    say_new_warnings(view, said)
    say(f"service {view['name']}: rolling to version {view['version']} ({view['status']})")


@app.command("down")
def down(name: Name, as_json: Json = False) -> None:
    """Drain and terminate every replica, then close the endpoint."""
    with client() as api:
        view = api.serve_down(name)
    if as_json:
        print_json(view)
        return
    typer.echo(f"service {view['name']}: {view['status']}")


@app.command("status")
def status(
    name: Annotated[str | None, typer.Argument(help="One service (default: all).")] = None,
    as_json: Json = False,
) -> None:
    """Services: endpoint, replicas (where / spot / $ per hour / state), QPS, latency, load,
    $ per 1k requests and the scaling decisions."""
    with client() as api:
        views = [api.serve_status(name)] if name else api.serve_list()
    if as_json:
        print_json(views[0] if name else {"services": views})
        return
    if not views:
        typer.echo("no services")
        return
    for view in views:
        typer.echo(report(view, brief=name is None))


@app.command("logs")
def logs(
    name: Name,
    replica: Annotated[
        int | None, typer.Option("--replica", min=1, help="Replica number (default: newest).")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep following.")] = False,
) -> None:
    """A replica's output."""
    out = sys.stdout.buffer
    offset = 0
    with client() as api:
        while True:
            chunk = api.serve_logs(name, offset, replica=replica, wait_s=5.0 if follow else 0.0)
            if chunk.data:
                out.write(chunk.data)
                out.flush()
                offset = chunk.next_offset
                continue
            if not follow or chunk.complete or chunk.service_status == "down":
                return
            time.sleep(0.2)


def _money(value: float | None, digits: int = 4) -> str:
    return f"${value:,.{digits}f}" if value is not None else "-"


def report(view: dict[str, Any], *, brief: bool = False) -> str:
    load = view["load"]
    cost = view["cost"]
    p50, p95 = load.get("latency_p50_ms"), load.get("latency_p95_ms")
    latency = f"p50 {p50:.1f} ms, p95 {p95:.1f} ms" if p50 is not None and p95 else "no latency yet"
    lines = [
        f"service {view['name']}: {view['status']} (version {view['version']}) — {view['reason']}",
        f"  endpoint {view['endpoint']}",
        f"  replicas {sum(1 for r in view['replicas'] if r['state'] == 'ready')} ready of "
        f"{view['desired_replicas']} wanted (min {view['min_replicas']}, "
        f"max {view['max_replicas']})",
        f"  {load['qps']:.1f} req/s, {latency}, in flight {load['in_flight']}, "
        f"load {load['load'] if load['load'] is not None else '-'}",
        f"  {_money(cost['per_hour_usd'])}/h now, spent {_money(cost['spent_usd'])}, "
        f"{_money(cost['per_1k_requests_usd'], 6)} per 1k requests",
    ]
    if brief:
        return "\n".join(lines)
    if view.get("secrets"):
        lines.append(f"  secrets: {', '.join(view['secrets'])}")
    lines.append(_replica_table(view["replicas"]))
    if view["decisions"]:
        lines.append("  scaling decisions:")
        for d in view["decisions"][-20:]:
            when = time.strftime("%H:%M:%S", time.localtime(d["at"]))
            lines.append(f"    {when} {d['from']} → {d['to']}: {d['reason']}")
    if view.get("last_error"):
        lines.append(f"  last error: {view['last_error']}")
    return "\n".join(lines)


def _replica_table(replicas: list[dict[str, Any]]) -> str:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("#", "STATE", "VERSION", "WHERE", "INSTANCE", "SPOT", "$/H", "CLUSTER"):
        table.add_column(column)
    for r in replicas:
        table.add_row(
            str(r["index"]), r["state"], str(r["version"]), r["where"] or "-",
            r["instance_type"] or "-", "yes" if r["spot"] else "no",
            _money(r["price_per_hour"]), r["cluster"],
        )  # fmt: skip
    out = console()
    with out.capture() as captured:
        out.print(table)
    return captured.get().rstrip()
