"""``gpulease sla [--month 2026-11] [--json]``: the month's availability per provider and region
against the promise in the config's ``sla:`` section, the breaches and the credit owed, from the
server (``GET /v1/sla``; docs/cost-sla.md). A bad ``--month`` exits 2 before the server is asked.
Moves no states.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from gpulease.cli.follow import client
from gpulease.cli.output import console, money, print_json


def sla(
    month: Annotated[
        str | None, typer.Option("--month", help="The month, YYYY-MM (default: this month, UTC).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Availability per provider and region against the SLA promise, and the credit owed."""
    if month is not None:
        from gpulease.cost.sla import parse_month  # imports the state: only when asked

        parse_month(month, time.time())  # a bad month: exit 2 without starting a server
    with client() as api:
        view = api.sla(month)
    if as_json:
        print_json(view)
        return
    render(view)


def render(view: Mapping[str, Any]) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"SLA {view['month']}", title_justify="left")
    for column in ("PROVIDER", "REGION", "NODE-H", "OUTAGE-H", "AVAILABLE", "PROMISE", "CREDIT"):
        table.add_column(column, justify="left" if column in ("PROVIDER", "REGION") else "right")
    for p in view["providers"]:
        promise = "—" if p["promise_pct"] is None else f"{p['promise_pct']:g}%"
        mark = "" if p["met"] else " (missed)"
        table.add_row(p["provider"], p["region"], f"{p['node_hours']:.1f}",
                      f"{p['outage_hours']:.2f}", f"{p['availability_pct']:.3f}%",
                      promise + mark, money(p["credit_usd"], 2))  # fmt: skip
    out.print(table)
    for b in view["breaches"]:
        at = datetime.fromtimestamp(b["start"], UTC).strftime("%Y-%m-%d %H:%M")
        who = b["cluster"] or f"node {b['node_id']}"
        out.print(f"  {at}  {b['kind']:<17} {who}  {b['outage_hours']:.2f} h  {b['reason']}")
    if not view["providers"]:
        out.print("no billed node time in this month")
    out.print(f"credit owed: {money(view['credit_usd'], 2)}")
