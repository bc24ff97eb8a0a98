"""``gpulease pool``: pools of nodes for managed jobs, sized by the queue — ``up POOL.yaml``,
``status [NAME] [--json]`` and ``down NAME`` (docs/pools.md). Moves no states itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

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

app = typer.Typer(help="Pools of nodes for managed jobs (resources.pool), sized by the queue.")

Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@app.command("up")
def up(
    pool_file: Annotated[Path, typer.Argument(help="Pool YAML: a task with a pool: section.")],
    name: Annotated[str | None, typer.Option("--name", "-n", help="Pool name.")] = None,
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", "-p", help="Only this provider (repeatable)."),
    ] = None,
    as_json: Json = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
    secret: SecretOption = None,
) -> None:
    """Start a pool: min..max nodes of the file's resources, each set up once (its setup), grown
    while managed jobs wait for it and shrunk when nodes stay idle."""
    envs, secrets = env_overrides(env, env_file), secret_overrides(secret)
    task, said = load_for_launch(pool_file, provider, envs, secrets)
    with client() as api:
        view = api.pool_up(task, name=name)
    if as_json:
        print_json(view)
        return
    say_new_warnings(view, said)
    say(f"pool {view['name']} up: {view['min_nodes']}..{view['max_nodes']} nodes, idle "
        f"timeout {view['idle_timeout_s']:g} s; run a job on it with resources: "
        f"{{pool: {view['name']}}}")  # fmt: skip


@app.command("status")
def status(
    name: Annotated[str | None, typer.Argument(help="Pool name (default: every pool).")] = None,
    as_json: Json = False,
) -> None:
    """Pools: status, nodes (idle / busy / provisioning), jobs waiting, $ per hour; with a name,
    also its nodes and sizing decisions."""
    with client() as api:
        found = [api.pool_status(name)] if name else api.pool_list()
    if as_json:
        print_json(found[0] if name else {"pools": found})
        return
    if name:
        typer.echo(report(found[0]))
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("NAME", "STATUS", "NODES", "IDLE", "BUSY", "WAITING", "MIN..MAX", "$/H"):
        table.add_column(column)
    for pool in found:
        kinds = [n["state"] for n in pool["nodes"]]
        table.add_row(
            pool["name"], pool["status"], str(len(kinds)), str(kinds.count("idle")),
            str(kinds.count("busy")), str(len(pool["waiting_jobs"])),
            f"{pool['min_nodes']}..{pool['max_nodes']}", f"${pool['price_per_hour']:.2f}",
        )  # fmt: skip
    console().print(table)


@app.command("down")
def down(name: Annotated[str, typer.Argument(help="Pool name.")], as_json: Json = False) -> None:
    """Terminate every node of the pool (jobs still on it recover, then fail: the pool is
    gone); DOWN once the provider confirms them gone."""
    with client() as api:
        view = api.pool_down(name)
    if as_json:
        print_json(view)
        return
    say(f"pool {name}: {view['status']} ({len(view['nodes'])} node(s) being terminated)")


def report(view: dict[str, Any]) -> str:
    """One pool as text: its status, nodes and recent sizing decisions."""
    lines = [
        f"pool {view['name']}: {view['status']} ({view['reason']})",
        f"  nodes {len(view['nodes'])} (wanted {view['desired_nodes']}, "
        f"{view['min_nodes']}..{view['max_nodes']}), idle timeout {view['idle_timeout_s']:g} s, "
        f"${view['price_per_hour']:.2f}/h",
        f"  jobs waiting: {', '.join(map(str, view['waiting_jobs'])) or 'none'}",
    ]
    if view.get("secrets"):  # names only, never a value
        lines.append(f"  secrets: {', '.join(view['secrets'])}")
    for node in view["nodes"]:
        job = f" job {node['job_id']}" if node["job_id"] is not None else ""
        lines.append(f"  - {node['name']}: {node['state']} ({node['status']}{job}) "
                     f"{node['where']} {node['pricing']}")  # fmt: skip
    if view["decisions"]:
        lines.append("  decisions (newest last):")
    for d in view["decisions"][-10:]:
        at = time.strftime("%H:%M:%S", time.localtime(d["at"]))
        lines.append(f"    {at} +{d['add']} -{len(d['remove'])} → {d['desired']}: {d['reason']}")
    if view.get("last_error"):
        lines.append(f"  last error: {view['last_error']}")
    return "\n".join(lines)
