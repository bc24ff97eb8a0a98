"""``gpulease plan TASK.yaml``: ranked plans, the Pareto front and every rejection, for a task."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.cli.envs import EnvFileOption, EnvOption, env_overrides
from gpulease.cli.output import console, hours, money, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.bench.observed import ObservedCatalog
    from gpulease.catalog import Catalog
    from gpulease.optimizer import Plan, PlanResult
    from gpulease.spec import Task


def plan(
    task_file: Annotated[Path, typer.Argument(help="Task YAML (gpulease or SkyPilot format).")],
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            "-o",
            help="cheapest (default; meets the deadline), fastest (within the "
            "budget) or price-per-tflop.",
        ),
    ] = "cheapest",
    top: Annotated[int, typer.Option("--top", "-n", help="How many plans to show.", min=1)] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every reason.")] = False,
    run_hours: Annotated[
        float | None,
        typer.Option(
            "--hours",
            help="Run time in hours of a task without a workload: every plan takes that "
            "long, so plans get a cost and -o fastest has a time to rank by.",
        ),
    ] = None,
    observed: Annotated[
        bool,
        typer.Option(
            "--observed",
            help="Use the matmul throughput `gpulease bench CLUSTER` observed (the home's "
            "bench/observed.json) instead of the datasheet, for offers with enough runs.",
        ),
    ] = False,
    env: EnvOption = None,
    env_file: EnvFileOption = None,
) -> None:
    """Plan a task: what to rent, where, how long it takes and what it costs.

    Exits 0 with plans, 1 when no offer fits (the rejections say why), 2 on bad input."""
    import os
    import warnings

    from gpulease.config import load_config
    from gpulease.optimizer import plan_all
    from gpulease.providers.honoured import ignored_field_warnings
    from gpulease.providers.registry import (
        SELLERS,
        build_providers,
        configured_providers,
        runtime_catalog,
    )
    from gpulease.spec import load_task_with_warnings

    envs = env_overrides(env, env_file)  # a missing value is only a warning: plans need none
    task, spec_warnings = load_task_with_warnings(task_file, envs=envs, environ=os.environ)
    config = load_config()
    providers = configured_providers(config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sellers = build_providers(config, only=SELLERS)
        catalog = runtime_catalog(sellers)
        seen = _observed(task, catalog) if observed else None
        result = plan_all(
            task,
            catalog=catalog if seen is None else seen.catalog,
            objective=objective,
            top=top,
            launchable=frozenset(providers),
            config=config,
            hours=run_hours,
        )
    if seen is not None:
        result = _with_datasheet_parts(result, seen)
    launched_on = (p.provider for p in result.plans if p.launchable)
    spec_warnings += ignored_field_warnings(task.resources, launched_on)
    if as_json:
        data = result.to_dict()
        data["warnings"] = spec_warnings
        print_json(data)
    else:
        err = console(stderr=True)
        for warning in spec_warnings:
            err.print(f"[yellow]warning:[/] {warning}")
        render(result, title=task.name or task_file.name, verbose=verbose)
    if not result.plans:
        _no_plan(result)


def _observed(task: Task, catalog: Catalog) -> ObservedCatalog:
    """The catalog with the observed matmul figures of the task's precision (``--observed``)."""
    from gpulease.bench.observed import (
        OBSERVED_FILE,
        ObservedCatalog,
        observed_catalog,
        read_observed,
    )
    from gpulease.config import home

    if task.workload is None:
        note = "observed: the task has no workload, so throughput changes no plan's hours"
        return ObservedCatalog(catalog, {}, (note,))
    path = home() / OBSERVED_FILE
    try:
        found = read_observed(path)
    except ValueError as exc:
        raise UserInputError(f"--observed: {exc}") from None
    return observed_catalog(catalog, found, task.workload.precision, source=str(path))


def _with_datasheet_parts(result: PlanResult, seen: ObservedCatalog) -> PlanResult:
    """``result`` with each derived part named by its datasheet part again (plans, their
    reasons, the rejections), and the observed notes added."""
    from dataclasses import replace

    def named(text: str) -> str:
        for part, original in seen.parts.items():
            text = text.replace(part, original)
        return text

    def back(plan: Plan) -> Plan:
        original = seen.parts.get(plan.part)
        if original is None:
            return plan
        return replace(plan, part=original, reasons=tuple(named(r) for r in plan.reasons))

    rejected = tuple(replace(r, reason=named(r.reason)) for r in result.rejected)
    return replace(result, plans=tuple(back(p) for p in result.plans),
                   pareto=tuple(back(p) for p in result.pareto), rejected=rejected,
                   notes=(*result.notes, *seen.notes))  # fmt: skip


def _no_plan(result: PlanResult) -> None:
    """Exit 1, the rejection summary on stderr: a script tells "no offer fits" from success
    (0) and from bad input (2)."""
    last = f"; the last offers left: {result.rejected[-1].reason}" if result.rejected else ""
    console(stderr=True).print(
        f"[red]error:[/] no feasible plan: none of {result.offers_considered} offers fits the "
        f"task{last}",
        markup=True,
        highlight=False,
    )
    raise typer.Exit(1)


def render(result: PlanResult, *, title: str, verbose: bool) -> None:
    out = console()
    if result.plans:
        out.print(_table(result.plans, f"{title}: top plans ({result.objective})"))
        out.print()
        _print_reasons(out, result.plans, verbose)
    if len(result.pareto) > 1:
        out.print(_table(result.pareto, "cost / time Pareto front", compact=True))
    if result.rejected:
        out.print()
        out.print(f"[bold]Rejected[/] (of {result.offers_considered} offers):")
        for rejection in result.rejected:
            out.print(f"  {rejection.offers:>6}  {rejection.reason}", markup=False)
    for note in result.notes:
        out.print(f"[dim]note: {note}[/]")


def _table(plans: tuple[Plan, ...], title: str, *, compact: bool = False) -> object:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    serving = any(p.serving for p in plans)  # inference: latency and $ per 1M output tokens
    extra = ("p95", "$/1M tok", "$/1k req") if serving else ()
    for column in (
        "#",
        "provider",
        "region",
        "instance",
        "GPUs",
        "pricing",
        "$/h",
        "hours",
        "cost (low–high)",
        *extra,
    ):
        right = column in {"#", "GPUs", "$/h", *extra}
        table.add_column(column, justify="right" if right else "left")
    for p in plans:
        where = p.region + (f" ({p.zone})" if p.zone else "")
        gpus = (
            f"{p.num_nodes}×{p.gpus_per_node} {p.accelerator}"
            if p.num_nodes > 1
            else f"{p.gpus_per_node} {p.accelerator}"
        )
        if p.cpu_only:
            gpus = f"{p.num_nodes}× CPU only" if p.num_nodes > 1 else "CPU only"
        cost = (
            "—"
            if p.est_cost is None
            else (
                f"{money(p.est_cost.expected)} ({money(p.est_cost.low)}–{money(p.est_cost.high)})"
            )
        )
        table.add_row(
            str(p.rank),
            p.provider,
            where,
            p.instance_type,
            gpus,
            p.pricing.replace("_", "-"),
            f"{p.price_per_hour:,.2f}",
            hours(p.est_hours.expected if p.est_hours else None),
            cost,
            *(_serving_cells(p) if serving else ()),
        )
    return table


def _serving_cells(p: Plan) -> tuple[str, str, str]:
    """p95 latency, $ per 1M output tokens and $ per 1k requests of an inference plan."""
    s = p.serving
    if s is None:
        return ("—", "—", "—")
    p95 = "—" if s.latency_p95_s is None else f"{s.latency_p95_s:.1f} s"
    per_token = s.usd_per_1m_output_tokens
    per_request = s.usd_per_1k_requests
    return (
        p95,
        "—" if per_token is None else f"{per_token:,.2f}",
        "—" if per_request is None else f"{per_request:,.3f}",
    )


def _print_reasons(out: object, plans: tuple[Plan, ...], verbose: bool) -> None:
    shown = plans if verbose else plans[:3]
    for p in shown:
        out.print(f"[bold]#{p.rank}[/] {p.provider} {p.instance_type}:")  # type: ignore[attr-defined]
        for reason in p.reasons:
            out.print(f"    • {reason}", markup=False)  # type: ignore[attr-defined]
    if not verbose and len(plans) > 3:
        out.print("[dim]  (--verbose shows the reasons of every plan)[/]")  # type: ignore[attr-defined]
