"""``gpulease cost [--since 30d | --month 2026-11] [--by day|cluster|...] [--json | --csv]``:
what the install spent, from the server's ledger (``GET /v1/cost``): a Rich table of the
breakdown with the totals, spot savings, estimated against actual and the month's forecast;
``--json`` prints the report as the server gave it, ``--csv`` the breakdown rows. The options are
checked here first (exit 2 naming the option, no server needed). Moves no states.
"""

from __future__ import annotations

import csv
import io
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.cli.output import console, print_json
from gpulease.cost.period import GROUPS, check_by, resolve
from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from rich.console import RenderableType

CSV_FIELDS = ("key", "cost_usd", "billed_hours", "gpu_hours", "entries", "spot_savings_usd")


def cost(
    since: Annotated[
        str | None, typer.Option("--since", help="The last N s|m|h|d|w up to now (default 30d).")
    ] = None,
    month: Annotated[
        str | None, typer.Option("--month", help="A UTC calendar month, e.g. 2026-11.")
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", help=f"Break down by: {'|'.join(GROUPS)} (default day).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print the breakdown as CSV.")] = False,
) -> None:
    """What this install spent, from the cost ledger: totals, breakdown, spot savings,
    estimated against actual, and the month's forecast."""
    if as_json and as_csv:
        raise UserInputError("--json and --csv: give one of them, not both")
    resolve(since, month, 0.0)  # checks the values here: exit 2, naming the option
    check_by(by)
    with client() as api:
        report = api.cost(since=since, month=month, by=by)
    if as_json:
        print_json(report)
    elif as_csv:
        sys.stdout.write(to_csv(report))
    else:
        out = console()
        for part in render(report):
            out.print(part)


def to_csv(report: dict[str, Any]) -> str:
    """The breakdown rows as CSV (dollars to 6 decimals, hours to 4), a header first."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([report["by"], *CSV_FIELDS[1:]])
    for row in report["breakdown"]:
        writer.writerow([
            row["key"],
            f"{row['cost_usd']:.6f}",
            f"{row['billed_hours']:.4f}",
            f"{row['gpu_hours']:.4f}",
            row["entries"],
            f"{row['spot_savings_usd']:.6f}",
        ])  # fmt: skip
    return buffer.getvalue()


def _usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"-${-value:,.2f}" if value < 0 else f"${value:,.2f}"


def render(report: dict[str, Any]) -> list[RenderableType]:
    """The breakdown table, then the summary lines and the estimates table (cents shown)."""
    from rich.table import Table

    period, total = report["period"], report["total"]
    title = f"Cost {period['label']} ({period['start_iso'][:16]} – {period['end_iso'][:16]} UTC)"
    table = Table(title=title, title_justify="left")
    for name in (report["by"].upper(), "COST", "HOURS", "GPU-HOURS", "ENTRIES", "SPOT SAVED"):
        table.add_column(name, justify="left" if name == report["by"].upper() else "right")
    for row in report["breakdown"]:
        table.add_row(row["key"], _usd(row["cost_usd"]), f"{row['billed_hours']:,.1f}",
                      f"{row['gpu_hours']:,.1f}", str(row["entries"]),
                      _usd(row["spot_savings_usd"]))  # fmt: skip
    table.add_section()
    table.add_row("total", _usd(total["cost_usd"]), f"{total['billed_hours']:,.1f}",
                  f"{total['gpu_hours']:,.1f}", str(total["entries"]),
                  _usd(report["spot_savings"]["savings_usd"]), style="bold")  # fmt: skip
    return [table, *_summary(report), *_estimates(report)]


def _summary(report: dict[str, Any]) -> list[str]:
    kinds = ", ".join(f"{k} {_usd(v)}" for k, v in report["total"]["by_kind"].items())
    saved, fc = report["spot_savings"], report["forecast"]
    pct = "" if saved["savings_pct"] is None else f" ({saved['savings_pct']:.1f} %)"
    return [
        f"by kind: {kinds or 'nothing billed'}",
        f"spot savings: {_usd(saved['savings_usd'])}{pct} against "
        f"{_usd(saved['on_demand_equivalent_usd'])} on demand",
        f"forecast {fc['month']}: {_usd(fc['forecast_usd'])} "
        f"({_usd(fc['so_far_usd'])} so far + {_usd(fc['burn_usd_per_hour'])}/h now, "
        f"{fc['hours_left']:,.0f} h left)",
    ]


def _estimates(report: dict[str, Any]) -> list[RenderableType]:
    from rich.table import Table

    rows = report.get("estimates") or []
    if not rows:
        return ["estimated against actual: no run of the period had a plan estimate"]
    table = Table(title="Estimated against actual", title_justify="left")
    for name in ("RUN", "ESTIMATED", "ACTUAL", "DIFFERENCE", "BASIS"):
        table.add_column(name, justify="left" if name in {"RUN", "BASIS"} else "right")
    for row in rows:
        pct = "" if row["difference_pct"] is None else f" ({row['difference_pct']:+.1f} %)"
        table.add_row(f"{row['kind']} {row['name']}", _usd(row["estimated_usd"]),
                      _usd(row["actual_usd"]), f"{_usd(row['difference_usd'])}{pct}",
                      row["basis"])  # fmt: skip
    return [table]
