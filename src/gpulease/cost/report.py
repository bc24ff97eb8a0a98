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

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, and_, func, literal, select, union_all
from sqlalchemy.sql import Select

from gpulease.clock import Clock, SystemClock
from gpulease.cost.estimates import estimated_against_actual
from gpulease.cost.overlap import (
    DAY_S,
    LEDGER,
    Window,
    bound,
    day_index,
    greatest,
    least,
    measures,
)
from gpulease.cost.period import Period, check_by, month_of, resolve

_MEASURES = ("cost_usd", "billed_s", "gpu_s", "entries", "spot_savings_usd", "spot_cost_usd")
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
        return build_report(conn, period, group, now)


def build_report(conn: Connection, period: Period, by: str, now: float) -> dict[str, Any]:
    window = Window(period.start, period.end)
    kinds = _totals_by_kind(conn, window)
    total = _sum_rows(kinds.values())
    return {
        "period": period.to_json(),
        "by": by,
        "currency": "USD",
        "total": {
            **_shape(total),
            "by_kind": {k: round(v["cost_usd"], 6) for k, v in kinds.items()},
        },
        "breakdown": breakdown(conn, window, by),
        "spot_savings": _savings(total),
        "estimates": estimated_against_actual(conn, window),
        "forecast": forecast(conn, now),
    }


# ---- the breakdown ------------------------------------------------------------------------------


def breakdown(conn: Connection, window: Window, by: str) -> list[dict[str, Any]]:
    """One row per group, most expensive first (``day``: in date order)."""
    if by == "day":
        return _by_day(conn, window)
    columns = [LEDGER.c[name] for name in _COLUMNS[by]]
    query = (
        select(*columns, *measures(window.share))
        .where(window.counts)
        .group_by(*columns)
        .order_by(func.sum(LEDGER.c.cost_usd * window.share).desc(), *columns)
    )
    rows = []
    for row in conn.execute(query).mappings():
        key = "/".join("-" if row[c.name] is None else str(row[c.name]) for c in columns)
        rows.append({"key": key, **_shape(row)})
    return rows


def _by_day(conn: Connection, window: Window) -> list[dict[str, Any]]:
    """UTC days: a row inside one day is grouped by its day number; a row across midnight is
    split over the days it covers (a join with the period's days, a recursive CTE), each part
    pro-rated like any overlap. Both halves are one ``UNION ALL`` summed per day."""
    first = day_index(window.lo)
    crosses = window.hi > (first + 1) * DAY_S
    one_day = (
        select(first.label("day"), *measures(window.share))
        .where(window.counts, ~crosses)
        .group_by(first)
    )
    start_day, last_day = (
        int(window.start // DAY_S),
        int(max(window.start, window.end - 1e-6) // DAY_S),
    )
    seed = select(literal(start_day).label("d")).cte("days", recursive=True)
    days = seed.union_all(select(seed.c.d + 1).where(seed.c.d < last_day))
    d_lo, d_hi = days.c.d * DAY_S, (days.c.d + 1) * DAY_S
    part_lo = greatest(window.lo, d_lo)
    part_hi = least(window.hi, d_hi)
    share = (part_hi - part_lo) / window.length
    spread = (
        select(days.c.d.label("day"), *measures(share))
        .select_from(LEDGER.join(days, and_(d_lo < window.hi, d_hi > window.lo)))
        .where(window.counts, crosses)
        .group_by(days.c.d)
    )
    parts = union_all(one_day, spread).subquery()
    summed = [func.sum(parts.c[m]).label(m) for m in _MEASURES]
    query = select(parts.c.day, *summed).group_by(parts.c.day).order_by(parts.c.day)
    return [
        {"key": _date(int(row["day"])), **_shape(row)} for row in conn.execute(query).mappings()
    ]


def _date(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_S, tz=UTC).date().isoformat()


# ---- totals, savings, forecast ------------------------------------------------------------------


def _totals_by_kind(conn: Connection, window: Window) -> dict[str, dict[str, float]]:
    query: Select[Any] = (
        select(LEDGER.c.kind, *measures(window.share))
        .where(window.counts)
        .group_by(LEDGER.c.kind)
        .order_by(LEDGER.c.kind)
    )
    return {
        str(row["kind"]): {m: float(row[m]) for m in _MEASURES}
        for row in conn.execute(query).mappings()
    }


def _sum_rows(rows: Sequence[dict[str, float]] | Any) -> dict[str, float]:
    total = dict.fromkeys(_MEASURES, 0.0)
    for row in rows:
        for m in _MEASURES:
            total[m] += float(row[m])
    return total


def _shape(row: Any) -> dict[str, Any]:
    """The measures of one group as the report shows them (hours, not seconds)."""
    return {
        "cost_usd": float(row["cost_usd"]),
        "billed_hours": float(row["billed_s"]) / 3600.0,
        "gpu_hours": float(row["gpu_s"]) / 3600.0,
        "entries": int(row["entries"]),
        "spot_savings_usd": float(row["spot_savings_usd"]),
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
    """
    name, start, end = month_of(now)
    so_far = _sum_rows(_totals_by_kind(conn, Window(start, now)).values())["cost_usd"]
    c = LEDGER.c
    from_at = greatest(c.ended_at, bound(start))
    rest_s = greatest(bound(end) - from_at, bound(0.0))
    query = select(
        func.coalesce(func.sum(c.price_per_hour), bound(0.0)).label("burn"),
        func.coalesce(func.sum(c.price_per_hour * rest_s / 3600.0), bound(0.0)).label("rest"),
        func.count().label("open"),
    ).where(c.closed.is_(False), c.started_at < bound(end))
    row = conn.execute(query).mappings().one()
    return {
        "month": name,
        "as_of": now,
        "so_far_usd": so_far,
        "burn_usd_per_hour": float(row["burn"]),
        "open_entries": int(row["open"]),
        "hours_left": max(0.0, (end - now) / 3600.0),
        "forecast_usd": so_far + float(row["rest"]),
    }
