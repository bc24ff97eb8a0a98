"""Cluster commands, all through the server: ``status`` (with each running cluster's mean GPU
utilisation, from the relayed telemetry, and a line per budget of the server's config),
``logs``, ``exec``, ``down``, ``stop``, ``start``,
``autostop`` and ``check``."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from gpulease.cli.follow import client, follow, say
from gpulease.cli.output import console, print_json
from gpulease.cli.top_cmd import gpu_utilisation_by_cluster

Name = Annotated[str, typer.Argument(help="Cluster name.")]
Rank = Annotated[int, typer.Option("--rank", "-r", min=0, help="Which node (0 = the head).")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]
Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until it is done.")]


def register(app: typer.Typer) -> None:
    for name, fn in (
        ("status", status),
        ("logs", logs),
        ("exec", exec_),
        ("down", down),
        ("stop", stop),
        ("start", start),
        ("autostop", autostop),
        ("check", check),
    ):
        app.command(name)(fn)  # fmt: skip


def status(
    names: Annotated[list[str] | None, typer.Argument(help="Only these clusters.")] = None,
    as_json: Json = False,
) -> None:
    """Clusters: status, where, nodes, price, GPU utilisation, autostop, failovers."""
    with client() as api:
        clusters = [api.cluster(n) for n in names] if names else api.clusters()
        running = any(c["status"] == "running" for c in clusters)
        gpus = gpu_utilisation_by_cluster(api) if running else {}
        for c in clusters:  # the running ones' mean GPU utilisation (None: no telemetry)
            c["gpu_utilization_pct"] = gpus.get(c["name"]) if c["status"] == "running" else None
        budgets = [] if names else api.budgets()
    if as_json:
        print_json({"clusters": clusters, **({"budgets": budgets} if budgets else {})})
        return
    if not clusters:
        typer.echo("no clusters")
    else:
        _table(clusters)
    for b in budgets:  # one line per budgets: entry: spend / limit, % and action
        typer.echo(f"budget {b['line']}")


def _autostop(auto: dict[str, Any]) -> str:
    """``30 min``, ``30 min (down)``, ``30 min, GPU<5%``, or ``-``."""
    if auto["minutes"] is None:
        return "-"
    below = auto.get("gpu_utilisation_below")
    rule = f", GPU<{below:g}%" if below is not None else ""
    return f"{auto['minutes']} min{rule}{' (down)' * auto['down']}"


def _table(clusters: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    columns = ("NAME", "STATUS", "WHERE", "NODES", "$/H", "GPU", "AUTOSTOP", "AGE", "FAILOVERS")
    for column in columns:
        table.add_column(column)
    now = time.time()
    for c in clusters:
        price = c.get("price_per_hour")
        auto = c["autostop"]
        table.add_row(
            c["name"],
            c["status"].upper(),
            "/".join(p for p in (c["provider"], c["region"]) if p),
            f"{c['num_nodes']}× {c['instance_type'] or '-'}",
            "-" if price is None else f"{price:,.2f}",
            "-" if (util := c.get("gpu_utilization_pct")) is None else f"{util:.0f}%",
            _autostop(auto),
            _age(now - c["created_at"]),
            "; ".join(f"{f['region']}: {f['error'][:60]}" for f in c["failover_history"]) or "-",
        )
    console().print(table)
    for c in clusters:
        if c["status"] == "failed" and c.get("reason"):
            typer.echo(f"{c['name']}: {c['reason']}")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def logs(
    name: Name,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Follow until it ends.")] = False,
    rank: Rank = 0,
) -> None:
    """Print the task's output (``-f``: follow it; exits with the task's exit status)."""
    with client() as api:
        if follow_:
            raise typer.Exit(follow(api, name, rank=rank))
        offset = 0
        while True:
            chunk = api.logs(name, offset, rank=rank)
            sys.stdout.buffer.write(chunk.data)
            offset = chunk.next_offset
            if not chunk.data or chunk.complete:
                break
        sys.stdout.flush()


def exec_(
    name: Name,
    command: Annotated[str, typer.Argument(help="Shell command, run in the task's work dir.")],
    rank: Rank = 0,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds.")] = 60.0,
) -> None:
    """Run a command on a node of the cluster, with the task's environment."""
    with client() as api:
        result = api.exec(name, command, rank=rank, timeout_s=timeout)
    sys.stdout.write(result["output"])
    sys.stdout.flush()
    if result["timed_out"]:
        say(f"error: timed out after {timeout:g} s")
        raise typer.Exit(124)
    raise typer.Exit(result["exit_code"] or 0)


def _change(name: str, call: Callable[[Any], dict[str, Any]], until: set[str], wait: bool,
            timeout: float) -> None:  # fmt: skip
    with client() as api:
        view = call(api)
        deadline = time.monotonic() + timeout
        while wait and view["status"] not in until and time.monotonic() < deadline:
            time.sleep(0.25)
            view = api.cluster(name)
    typer.echo(f"{name}: {view['status']}")
    if wait and view["status"] not in until:
        say(f"error: {name} is still {view['status']} after {timeout:g} s")
        raise typer.Exit(1)


Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait.")]


def down(names: Annotated[list[str], typer.Argument(help="Clusters to terminate.")],
         wait: Wait = True, timeout: Timeout = 300.0) -> None:  # fmt: skip
    """Terminate clusters (waits until the provider confirms every node gone)."""
    for name in names:
        _change(name, _downer(name), {"terminated"}, wait, timeout)


def _downer(name: str) -> Callable[[Any], dict[str, Any]]:
    return lambda api: api.down(name)


def stop(name: Name, wait: Wait = True, timeout: Timeout = 300.0) -> None:
    """Stop a cluster's nodes (disks kept; ``start`` brings them back)."""
    _change(name, lambda api: api.stop(name), {"stopped", "failed"}, wait, timeout)


def start(name: Name, wait: Wait = True, timeout: Timeout = 300.0) -> None:
    """Start a stopped cluster's nodes again."""
    done = {"running", "succeeded", "failed"}
    _change(name, lambda api: api.start(name), done, wait, timeout)


def autostop(
    name: Name,
    idle_minutes: Annotated[
        int, typer.Option("--idle-minutes", "-i", min=0, help="Idle minutes before stopping.")
    ],
    down_: Annotated[bool, typer.Option("--down", help="Terminate instead of stopping.")] = False,
    gpu_below: Annotated[
        float | None,
        typer.Option(
            "--gpu-utilisation-below",
            "--gpu-below",
            min=0.0,
            max=100.0,
            help="Also idle while every GPU stays below this %% (kept when left out).",
        ),
    ] = None,
    cancel: Annotated[bool, typer.Option("--cancel", help="Turn autostop off.")] = False,
) -> None:
    """Stop (or, with --down, terminate) the cluster after it has been idle this long."""
    with client() as api:
        minutes = None if cancel else idle_minutes
        view = api.autostop(name, minutes, down=down_, gpu_utilisation_below=gpu_below)
    auto = view["autostop"]
    if auto["minutes"] is None:
        typer.echo(f"{name}: autostop off")
        return
    action = "terminate" if auto["down"] else "stop"
    below = auto.get("gpu_utilisation_below")
    rule = f" (idle: no task, or GPUs below {below:g}%)" if below is not None else ""
    typer.echo(f"{name}: {action} after {auto['minutes']} idle min{rule}")


def check(as_json: Json = False) -> None:
    """Which providers this install can launch on."""
    with client() as api:
        providers = api.providers()
    if as_json:
        print_json({"providers": providers})
        return
    for p in providers:
        if not p["enabled"]:
            typer.echo(f"{p['name']}: disabled — {p.get('reason', 'not configured')}")
            continue
        caps = [k for k in ("stop_start", "spot", "multi_node") if p.get(k)]
        typer.echo(f"{p['name']}: enabled ({', '.join(caps) or 'basic'})")
