"""SQL expressions (SQLAlchemy Core, SQLite and PostgreSQL alike) over ``ledger_entries`` for a
period ``[start, end)``: which rows count, and each row's share of its cost in the period.

A row counts when its interval ``[started_at, ended_at)`` overlaps the period; its cost and
billed seconds count pro-rated by the share of its wall interval inside the period
(``overlap / (ended_at - started_at)``). A row of zero length (a minimum charge recorded at one
instant) counts whole in the period holding its ``started_at``. Pure; moves no states.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Double, and_, case, func, literal, or_, select
from sqlalchemy.sql import Subquery

from gpulease.state.ledger_days import day_of
from gpulease.state.models import LedgerEntry

LEDGER = LedgerEntry.__table__
DAY_S = 86400.0


day_index = day_of  # floor(t / 86400), the UTC day number: the rollup's own SQL function


def greatest(a: ColumnElement[float], b: ColumnElement[float]) -> ColumnElement[float]:
    return case((a > b, a), else_=b)


def least(a: ColumnElement[float], b: ColumnElement[float]) -> ColumnElement[float]:
    return case((a < b, a), else_=b)


def bound(value: float) -> ColumnElement[float]:
    return literal(float(value), Double())


class Window:
    """The expressions of one period over the ledger's columns."""

    def __init__(self, start: float, end: float) -> None:
        c = LEDGER.c
        self.start, self.end = float(start), float(end)
        s, e = bound(self.start), bound(self.end)
        self.lo: ColumnElement[float] = greatest(c.started_at, s)
        self.hi: ColumnElement[float] = least(c.ended_at, e)
        self.length: ColumnElement[float] = c.ended_at - c.started_at
        # ended_at >= start first, so an index on ended_at serves the range; the rest keeps a
        # row ending exactly at the start out unless it is an instant there
        self.counts: ColumnElement[bool] = and_(
            c.ended_at >= s, c.started_at < e, or_(c.ended_at > s, c.started_at >= s)
        )
        self.share: ColumnElement[float] = case(
            (self.length > 0, (self.hi - self.lo) / self.length), else_=bound(1.0)
        )


KINDS = ("instance", "volume", "storage")
SPLIT = ("cost_usd", "billed_s", "gpu_s", "spot_savings_usd")  # what --by day splits by day
_ROW_COLUMNS = ("kind", "pricing", "cost_usd", "billed_s", "gpu_count", "price_per_hour",
                "on_demand_price_per_hour", "started_at")  # fmt: skip


def rows_of(window: Window, *keys: ColumnElement[Any], open_only: bool = False) -> Subquery:
    """The period's rows with their ``share`` (and ``lo``, ``hi``, ``per_s``), computed once per
    row: an ``OFFSET 0`` subquery is not flattened into the aggregate above it (SQLite,
    PostgreSQL), which would repeat the share's ``CASE`` in every sum. A row wholly inside the
    period takes the short way (share 1). ``open_only``: the open rows alone (the daily rollup
    ``ledger_days`` holds the closed ones' whole days)."""
    c = LEDGER.c
    inside = and_(c.started_at >= bound(window.start), c.ended_at <= bound(window.end))
    share = case((inside, bound(1.0)), (window.length > 0, (window.hi - window.lo) / window.length),
                 else_=bound(1.0))  # fmt: skip
    per_s = case((window.length > 0, 1.0 / window.length), else_=bound(0.0))
    return (
        select(*keys, *(c[n] for n in _ROW_COLUMNS), share.label("share"),
               window.lo.label("lo"), window.hi.label("hi"), per_s.label("per_s"))
        .where(window.counts, *([c.closed.is_(False)] if open_only else []))
        .offset(0)
        .subquery("period_rows")
    )  # fmt: skip


def _bases(rows: Subquery) -> dict[str, ColumnElement[float]]:
    """Each measure of one row, whole (before the period's share)."""
    c = rows.c
    is_spot = and_(c.pricing == "spot", c.on_demand_price_per_hour.is_not(None))
    saving = (c.on_demand_price_per_hour - c.price_per_hour) * c.billed_s / 3600.0
    zero = bound(0.0)
    bases: dict[str, ColumnElement[float]] = {
        "cost_usd": c.cost_usd,
        "billed_s": c.billed_s,
        "gpu_s": c.billed_s * c.gpu_count,
        "spot_savings_usd": case((is_spot, saving), else_=zero),
        "spot_cost_usd": case((c.pricing == "spot", c.cost_usd), else_=zero),
    }
    for kind in KINDS:
        bases[f"cost_{kind}"] = case((c.kind == kind, c.cost_usd), else_=zero)
    return bases


MEASURES = (*_bases(rows_of(Window(0.0, 1.0))), "entries")


def measures(rows: Subquery, count_from: float | None = None) -> list[ColumnElement[Any]]:
    """The aggregates every report group has over :func:`rows_of`: each of :data:`MEASURES`
    (dollars, seconds, the cost of each kind, and ``entries``), weighted by the share.
    ``count_from``: ``entries`` counts only the rows starting then or later."""
    zero = bound(0.0)
    share = rows.c.share
    sums = [func.coalesce(func.sum(v * share), zero).label(k) for k, v in _bases(rows).items()]
    if count_from is None:
        return [*sums, func.count().label("entries")]
    starting = case((rows.c.started_at >= bound(count_from), 1), else_=0)
    return [*sums, func.coalesce(func.sum(starting), 0).label("entries")]


def rates(rows: Subquery, start: float) -> list[ColumnElement[Any]]:
    """For the rows of a group that cross midnight: per :data:`SPLIT` measure, Σ its rate
    (per wall second, ``rate_<m>``) and Σ rate × (overlap start − period start) (``lo_<m>``),
    from which the parts of each day follow (:func:`gpulease.cost.report.split_days`)."""
    since = rows.c.lo - bound(start)
    bases = _bases(rows)
    found: list[ColumnElement[Any]] = []
    for name in SPLIT:
        rate = bases[name] * rows.c.per_s
        found.append(func.sum(rate).label(f"rate_{name}"))
        found.append(func.sum(rate * since).label(f"lo_{name}"))
    return found
