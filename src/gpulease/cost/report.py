"""``gpulease cost``: what the install spent over a period, from the cost ledger (read only).

:func:`cost_report` answers, for a :class:`~gpulease.cost.period.Period`: the totals (by kind:
instance, volume, storage), a breakdown ``by`` one of :data:`~gpulease.cost.period.GROUPS`,
the spot savings (Σ over spot rows of (on-demand − spot $/h) × billed hours), estimated
against actual for the runs that had a plan estimate (:mod:`gpulease.cost.estimates`), and the
current month's forecast at the current burn rate. Rows count by their overlap with the
period, pro-rated (:mod:`gpulease.cost.overlap`). Everything is a SQL aggregate (SQLAlchemy
Core, SQLite and PostgreSQL alike); Python only shapes the few result groups. Moves no states.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from gpulease.clock import Clock, SystemClock
from gpulease.cost import rollup
from gpulease.cost.estimates import estimated_against_actual
from gpulease.cost.overlap import (
    DAY_S,
    KINDS,
    LEDGER,
    MEASURES,
    SPLIT,
    Window,
    bound,
    day_index,
    greatest,
    measures,
    rates,
    rows_of,
)
from gpulease.cost.period import Period, check_by, month_of, resolve
from gpulease.state.models import LedgerEntry

_COLUMNS: dict[str, tuple[str, ...]] = {
    "cluster": ("cluster_name",),
    "job": ("job_id",),
    "task": ("task_name",),
    "provider": ("provider",),
    "region": ("provider", "region"),
    "gpu": ("accelerator",),
    "pricing": ("pricing",),
    "user": ("user",),
}


def cost_report(
    engine: Engine,
    *,
    since: str | None = None,
    month: str | None = None,
    by: str | None = None,
    clock: Clock | None = None,
) -> dict[str, Any]:
    """The report as JSON-ready data (see docs/cost-report.md for its shape)."""
    now = (clock or SystemClock()).now()
    period = resolve(since, month, now)
    group = check_by(by)
    with engine.connect() as conn:
        if month is None:
            period = reaching_the_ledger(conn, period)
        return build_report(conn, period, group, now)


def reaching_the_ledger(conn: Connection, period: Period) -> Period:
    """``--since``: up to now, or to the ledger's newest second when a provider's own clock runs
    ahead of the server's (the sim in scaled time bills on its clock), so nothing billed after
    the period's start is left out."""
    newest = conn.execute(select(func.max(LedgerEntry.ended_at))).scalar()
    if newest is None or newest < period.end:
        return period
    return replace(period, end=float(newest) + 1e-6)


def build_report(conn: Connection, period: Period, by: str, now: float) -> dict[str, Any]:
    """One pass over the period's rows gives the breakdown, and the totals are its sum; the
    forecast and the estimates read narrow indexes (see docs/cost-report.md)."""
    window = Window(period.start, period.end)
    groups = breakdown(conn, window, by)
    total = dict.fromkeys(MEASURES, 0.0)
    for group in groups:  # the groups, never the rows
        for m in MEASURES:
            total[m] += group[m]
    if by == "day":  # a row over several days is in several groups: count it once
        total["entries"] = float(_entries(conn, window))
    return {
        "period": period.to_json(),
        "by": by,
        "currency": "USD",
        "total": {
            **_shape(total),
            "by_kind": {k: total[f"cost_{k}"] for k in KINDS if total[f"cost_{k}"]},
        },
        "breakdown": [{"key": g["key"], **_shape(g)} for g in groups],
        "spot_savings": _savings(total),
        "estimates": estimated_against_actual(conn, window),
        "forecast": forecast(conn, now),
    }


# ---- the breakdown ------------------------------------------------------------------------------


def breakdown(conn: Connection, window: Window, by: str) -> list[dict[str, Any]]:
    """One dict of :data:`~gpulease.cost.overlap.MEASURES` per group (and its ``key``), most
    expensive first (``day``: in date order). The period's whole UTC days come from the daily
    rollup of the closed rows (:mod:`gpulease.cost.rollup`) plus the open rows; its partial
    first day (up to the first midnight after its start) and last day from the rows — the same
    pro-rated shares, summed in parts. A row counts once in ``entries``: in the first day, or
    where it starts (``day``: in each day it overlaps)."""
    first = (math.floor(window.start / DAY_S) + 1) * DAY_S
    last = math.floor(window.end / DAY_S) * DAY_S
    if last <= first:
        return _sorted(by, _from_rows(conn, window, by))
    day = by == "day"
    start_of = (lambda at: None) if day else (lambda at: at)  # whom entries count
    parts = [
        _from_rows(conn, Window(window.start, first), by),
        _from_rows(conn, Window(first, last), by, open_only=True, count_from=start_of(first)),
        rollup.whole_days(conn, by, round(first / DAY_S), round(last / DAY_S),
                          "entries" if day else "starts"),
    ]  # fmt: skip
    if window.end > last:
        parts.append(
            _from_rows(conn, Window(last, window.end), by, count_from=None if day else last)
        )
    merged: dict[Any, dict[str, float]] = {}
    for part in parts:
        for key, sums in part.items():
            into = merged.setdefault(key, dict.fromkeys(MEASURES, 0.0))
            for m in MEASURES:
                into[m] += sums.get(m, 0.0)
    return _sorted(by, merged)


def _sorted(by: str, groups: dict[Any, dict[str, float]]) -> list[dict[str, Any]]:
    if by == "day":
        return [{"key": _date(int(day)), **groups[day]} for day in sorted(groups)]
    order = sorted(groups, key=lambda k: (-groups[k]["cost_usd"], k))
    return [{"key": key, **groups[key]} for key in order]


def _from_rows(
    conn: Connection,
    window: Window,
    by: str,
    *,
    open_only: bool = False,
    count_from: float | None = None,
) -> dict[Any, dict[str, float]]:
    """Group key (``day``: the day number) → measures, from the rows (one grouped pass)."""
    if by == "day":
        return _by_day(conn, window, open_only=open_only)
    rows = rows_of(window, *(LEDGER.c[name] for name in _COLUMNS[by]), open_only=open_only)
    columns = [rows.c[name] for name in _COLUMNS[by]]
    query = select(*columns, *measures(rows, count_from)).group_by(*columns)
    found = {}
    for row in conn.execute(query).mappings():
        key = "/".join("-" if row[c.name] is None else str(row[c.name]) for c in columns)
        found[key] = {m: float(row[m]) for m in MEASURES}
    return found


def _by_day(conn: Connection, window: Window, *, open_only: bool) -> dict[Any, dict[str, float]]:
    """UTC days, in one pass grouped by the days a row's overlap starts and ends in; a row
    over midnight is split over its days pro rata (:func:`split_days`)."""
    rows = rows_of(window, open_only=open_only)
    first = day_index(rows.c.lo)
    last = day_index(greatest(rows.c.lo, rows.c.hi - 0.001))  # an end at midnight: the day before
    query = (
        select(first.label("first"), last.label("last"), *measures(rows),
               *rates(rows, window.start))
        .group_by(first, last)
    )  # fmt: skip
    days = split_days(window.start, [dict(row) for row in conn.execute(query).mappings()])
    return dict(days)


def split_days(start: float, groups: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per UTC day, the measures of groups of rows whose overlap runs from day ``first`` to day
    ``last``: a one-day group is that day's; a longer one gives its first day rate × (midnight −
    overlap start), each day between rate × 86,400 s, its last day the rest. Sums of groups,
    with the middle days as a difference array: O(groups + days)."""
    days: dict[int, dict[str, float]] = {}
    middle: dict[int, dict[str, float]] = {}

    def add(to: dict[int, dict[str, float]], day: int, name: str, value: float) -> None:
        to.setdefault(day, dict.fromkeys(MEASURES, 0.0))[name] += value

    for g in groups:
        first, last = int(g["first"]), int(g["last"])
        for name in MEASURES:
            if first == last or name not in SPLIT:
                add(days, first, name, float(g[name] or 0.0))
        if first == last:
            continue
        add(middle, first + 1, "entries", float(g["entries"]))
        add(middle, last + 1, "entries", -float(g["entries"]))
        for name in SPLIT:
            rate, lo = float(g[f"rate_{name}"] or 0.0), float(g[f"lo_{name}"] or 0.0)
            head = rate * ((first + 1) * DAY_S - start) - lo
            full = rate * DAY_S
            add(days, first, name, head)
            add(days, last, name, float(g[name] or 0.0) - head - full * (last - first - 1))
            add(middle, first + 1, name, full)
            add(middle, last, name, -full)
    running = dict.fromkeys(MEASURES, 0.0)
    for day in range(min(days, default=0), max(days, default=-1) + 1):
        for name, value in middle.get(day, {}).items():
            running[name] += value
        if any(running.values()):
            for name, value in running.items():
                add(days, day, name, value)
    return days


def _entries(conn: Connection, window: Window) -> int:
    return int(conn.execute(select(func.count()).where(window.counts)).scalar_one())


def _date(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_S, tz=UTC).date().isoformat()


# ---- totals, savings, forecast ------------------------------------------------------------------


def _shape(row: dict[str, float]) -> dict[str, Any]:
    """The measures of one group as the report shows them (hours, not seconds)."""
    return {
        "cost_usd": row["cost_usd"],
        "billed_hours": row["billed_s"] / 3600.0,
        "gpu_hours": row["gpu_s"] / 3600.0,
        "entries": int(row["entries"]),
        "spot_savings_usd": row["spot_savings_usd"],
    }


def _savings(total: dict[str, float]) -> dict[str, Any]:
    spot, saved = total["spot_cost_usd"], total["spot_savings_usd"]
    on_demand = spot + saved
    return {
        "savings_usd": saved,
        "spot_cost_usd": spot,
        "on_demand_equivalent_usd": on_demand,
        "savings_pct": round(100.0 * saved / on_demand, 2) if on_demand > 0 else None,
    }


def forecast(conn: Connection, now: float) -> dict[str, Any]:
    """The month holding ``now``: its ledger cost so far plus each open row's $/h over the rest
    of the month from where its accrual stands (``ended_at``, so an accrual lag is counted too).
    The month so far reads the ``(ended_at, started_at, cost_usd)`` index only."""
    name, start, end = month_of(now)
    so_far_window = Window(start, now)
    so_far = conn.execute(
        select(func.coalesce(func.sum(LEDGER.c.cost_usd * so_far_window.share), bound(0.0))).where(
            so_far_window.counts
        )
    ).scalar_one()
    c = LEDGER.c
    from_at = greatest(c.ended_at, bound(start))
    rest_s = greatest(bound(end) - from_at, bound(0.0))
    query = select(
        func.coalesce(func.sum(c.price_per_hour), bound(0.0)).label("burn"),
        func.coalesce(func.sum(c.price_per_hour * rest_s / 3600.0), bound(0.0)).label("rest"),
        func.count().label("open"),
    ).where(c.closed.is_(False))  # ix_ledger_entries_closed: the few open rows
    row = conn.execute(query).mappings().one()
    return {
        "month": name,
        "as_of": now,
        "so_far_usd": float(so_far),
        "burn_usd_per_hour": float(row["burn"]),
        "open_entries": int(row["open"]),
        "hours_left": max(0.0, (end - now) / 3600.0),
        "forecast_usd": float(so_far) + float(row["rest"]),
    }
