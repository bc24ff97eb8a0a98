"""``gpulease bench``: benchmark what you rent (docs/bench.md).

- ``gpulease bench [--json] [--quick] [--only F,..]`` runs the checks in process on this machine
  (:func:`gpulease.bench.runner.run_bench`);
- ``gpulease bench CLUSTER [...]`` asks the server to run them on every node of a running
  cluster at once, judged against each other and the instance type's history, and stored;
- ``gpulease bench --history [--instance-type T] [--cluster C] [--limit N]`` lists the stored
  runs.

Exit codes, for scripts: 0 when no check failed (warnings included), 1 when a check (or a node)
failed — the table or the JSON says which — and 2 on bad input or a cluster that is not up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

FAILED = 1
VERDICT_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim",
                 "info": "cyan"}  # fmt: skip


def bench(
    cluster: Annotated[
        str | None,
        typer.Argument(help="A running cluster: bench every node of it (default: this machine)."),
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="The acceptance subset, smaller sizes (< 30 s).")
    ] = False,
    only: Annotated[
        str | None,
        typer.Option("--only", help="These check families only, comma-separated (disk,matmul)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report(s) as JSON.")] = False,
    history: Annotated[
        bool, typer.Option("--history", help="List the server's stored runs instead.")
    ] = False,
    instance_type: Annotated[
        str | None, typer.Option("--instance-type", help="--history: of this instance type.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", help="--history: at most this many runs.", min=1, max=1000)
    ] = 20,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", help="In process: where the disk checks write (default: .)."),
    ] = None,
) -> None:
    """Benchmark GPUs, memory, interconnect and disk against datasheet, peers and history.

    Exits 0 when no check failed, 1 when one did (the output says which), 2 on bad input."""
    families = _families(only)
    if instance_type is not None and not history:
        raise UserInputError("--instance-type: only with --history")
    if workdir is not None and (cluster is not None or history):
        raise UserInputError("--workdir: only in process (a cluster's nodes use their work dir)")
    if history:
        _history(cluster, instance_type, limit, as_json)
        return
    if cluster is None:
        _in_process(quick, families, workdir or Path("."), as_json)
        return
    from gpulease.cli.follow import client

    with client() as api:
        answer = api.bench_cluster(cluster, quick=quick, only=families)
    if as_json:
        print_json(answer)
    else:
        _render_cluster(answer)
    if answer["verdict"] == "fail":
        raise typer.Exit(FAILED)


def _families(only: str | None) -> tuple[str, ...] | None:
    if only is None:
        return None
    from gpulease.bench.options import known_families

    try:
        return known_families(only.split(","))
    except ValueError as exc:
        raise UserInputError(str(exc)) from None


def _in_process(quick: bool, families: tuple[str, ...] | None, workdir: Path,
                as_json: bool) -> None:  # fmt: skip
    from gpulease.bench.options import BenchOptions
    from gpulease.bench.runner import run_bench

    report = run_bench(BenchOptions(quick=quick, only=families, workdir=workdir))
    if as_json:
        print_json(report.to_json())
    else:
        console().print(checks_table(report.to_json(), f"{report.node}: {report.verdict}"))
    if report.verdict == "fail":
        raise typer.Exit(FAILED)


def checks_table(report: Mapping[str, Any], title: str) -> object:
    """One node's checks: figure, unit, reference (its source), ratio, verdict, detail."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("check", "figure", "unit", "reference", "ratio", "verdict", "detail"):
        table.add_column(column, justify="right" if column in ("figure", "ratio") else "left")
    for c in report.get("checks", ()):
        reference = "—" if c.get("reference") is None else (
            f"{_num(c['reference'])} ({c.get('reference_source') or '?'})")  # fmt: skip
        ratio = "—" if c.get("ratio") is None else f"{c['ratio']:.2f}"
        verdict = str(c.get("verdict", "info"))
        style = VERDICT_STYLE.get(verdict, "")
        table.add_row(str(c["name"]), _num(c.get("figure")), str(c.get("unit", "")), reference,
                      ratio, f"[{style}]{verdict}[/]" if style else verdict,
                      str(c.get("detail", "")))  # fmt: skip
    return table


def _num(value: object) -> str:
    if not isinstance(value, int | float):
        return "—"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _render_cluster(answer: Mapping[str, Any]) -> None:
    out = console()
    for node in answer["nodes"]:
        head = f"{answer['cluster']} node {node['rank']} ({node['instance_id']}): {node['verdict']}"
        if "report" in node:
            out.print(checks_table(node["report"], head))
        else:
            out.print(f"[bold red]{head}[/]: {node.get('error')}", highlight=False)
    out.print(f"verdict: {answer['verdict']}; observed summary: {answer['observed']}",
              highlight=False)  # fmt: skip


def _history(cluster: str | None, instance_type: str | None, limit: int, as_json: bool) -> None:
    from gpulease.cli.follow import client

    with client() as api:
        runs = api.bench_history(instance_type=instance_type, cluster=cluster, limit=limit)
    if as_json:
        print_json({"runs": runs})
        return
    render_history(runs)


def render_history(runs: Sequence[Mapping[str, Any]]) -> None:
    from rich.table import Table

    table = Table(title="bench runs (newest first)", title_justify="left")
    for column in ("started", "cluster", "rank", "provider", "instance", "accelerator", "kind",
                   "verdict", "failed checks"):  # fmt: skip
        table.add_column(column, justify="right" if column == "rank" else "left")
    for run in runs:
        at = datetime.fromtimestamp(run["started_at"], UTC).strftime("%Y-%m-%d %H:%M")
        failed = [c["name"] for c in run["report"].get("checks", ()) if c["verdict"] == "fail"]
        table.add_row(at, run["cluster"], str(run["rank"]), run["provider"],
                      run["instance_type"] or "—", run["accelerator"] or "—",
                      "quick" if run["quick"] else "full", run["verdict"],
                      ", ".join(failed) or "—")  # fmt: skip
    console().print(table)
    if not runs:
        console().print("no stored bench runs")
