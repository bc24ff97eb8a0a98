"""``gpulease spot-sim TRACE...``: evaluate spot/on-demand policies on availability traces (through
:func:`gpulease.spot.run_spot_sim`), in process, as a Rich table or ``--json``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulease.cli.output import console, print_json
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from gpulease.spot import Cell

DEFAULT_POLICIES = "on_demand,greedy,uniform_progress,gpulease,optimal"


def _floats(flag: str, text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            values.append(float(part.strip()))
        except ValueError:
            raise UserInputError(f"{flag}: {part.strip()!r} is not a number") from None
    return values


def _ints(flag: str, text: str) -> list[int]:
    values = []
    for part in text.split(","):
        try:
            values.append(int(part.strip()))
        except ValueError:
            raise UserInputError(f"{flag}: {part.strip()!r} is not a whole number") from None
    return values


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def spot_sim(
    traces: Annotated[
        list[Path], typer.Argument(help="Spot-traces JSON files.", show_default=False)
    ],
    job_hours: Annotated[float, typer.Option("--job-hours", help="Job length C.")] = 48.0,
    deadline_hours: Annotated[
        str, typer.Option("--deadline-hours", help="Deadlines D, comma-separated.")
    ] = "52,60,70",
    changeover_hours: Annotated[
        str, typer.Option("--changeover-hours", help="Changeover d, comma-separated.")
    ] = "0.2",
    policy: Annotated[
        str, typer.Option("--policy", help="Policies, comma-separated.")
    ] = DEFAULT_POLICIES,
    starts: Annotated[
        int | None, typer.Option("--starts", help="Random windows per trace [default: 300].")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the window draw.")] = 0,
    start_ticks: Annotated[
        str | None, typer.Option("--start-ticks", help="Exact start ticks, comma-separated.")
    ] = None,
    nodes: Annotated[int, typer.Option("--nodes", help="Spot instances the job needs.")] = 1,
    od_price: Annotated[float, typer.Option("--od-price", help="On-demand $/h.")] = 3.06,
    spot_price: Annotated[float, typer.Option("--spot-price", help="Spot $/h.")] = 0.9731,
    history_hours: Annotated[
        float,
        typer.Option(
            "--history-hours",
            help="Hours of the trace before each window that gpulease learns from (0: none).",
        ),
    ] = 168.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Simulate spot/on-demand policies on spot availability traces, against the exact optimum."""
    from gpulease.spot import load_trace, run_spot_sim

    deadlines = _floats("--deadline-hours", deadline_hours)
    changeovers = _floats("--changeover-hours", changeover_hours)
    policies = _names(policy)
    ticks = _ints("--start-ticks", start_ticks) if start_ticks is not None else None
    loaded = []
    for path in traces:
        if not path.is_file():
            raise UserInputError(f"TRACE: {path}: no such file")
        loaded.append(load_trace(path))
    cells = run_spot_sim(
        loaded,
        job_hours=job_hours,
        deadline_hours=deadlines,
        changeover_hours=changeovers,
        policies=policies,
        starts=starts,
        seed=seed,
        start_ticks=ticks,
        nodes=nodes,
        od_price=od_price,
        spot_price=spot_price,
        history_hours=history_hours,
    )
    if as_json:
        print_json({"cells": [cell.as_dict() for cell in cells]})
        return
    _render(cells, job_hours=job_hours)


def _render(cells: list[Cell], *, job_hours: float) -> None:
    from rich.table import Table

    table = Table(
        title=f"Spot policies, {job_hours:g} h job (cost ÷ all-on-demand cost)",
        title_justify="left",
    )
    columns = (
        "trace",
        "deadline h",
        "changeover h",
        "policy",
        "nodes",
        "windows",
        "mean",
        "p25",
        "p75",
        "p90",
        "misses",
        "spot h",
        "on-demand h",
    )
    for col in columns:
        table.add_column(col, justify="left" if col in {"trace", "policy"} else "right")
    for c in cells:
        table.add_row(
            c.trace,
            f"{c.deadline_hours:g}",
            f"{c.changeover_hours:g}",
            c.policy,
            str(c.nodes),
            str(c.windows),
            f"{c.mean_cost_ratio:.3f}",
            f"{c.p25:.3f}",
            f"{c.p75:.3f}",
            f"{c.p90:.3f}",
            str(c.misses),
            f"{c.spot_hours:.1f}",
            f"{c.on_demand_hours:.1f}",
        )
    console().print(table)
