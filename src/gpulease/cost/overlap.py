"""SQL expressions (SQLAlchemy Core, SQLite and PostgreSQL alike) over ``ledger_entries`` for a
period ``[start, end)``: which rows count, and each row's share of its cost in the period.

A row counts when its interval ``[started_at, ended_at)`` overlaps the period; its cost and
billed seconds count pro-rated by the share of its wall interval inside the period
(``overlap / (ended_at - started_at)``). A row of zero length (a minimum charge recorded at one
instant) counts whole in the period holding its ``started_at``. Pure; moves no states.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Double, and_, case, func, literal, or_
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from gpulease.state.models import LedgerEntry

LEDGER = LedgerEntry.__table__
DAY_S = 86400.0


class day_index(FunctionElement[int]):  # noqa: N801 - a SQL function, named like one
    """``floor(t / 86400)``: the UTC day number of an epoch time ``t`` (``t`` ≥ 0)."""

    type = BigInteger()
    inherit_cache = True
    name = "day_index"


@compiles(day_index)
def _day_index(element: day_index, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(floor(({compiler.process(element.clauses, **kw)}) / 86400.0) AS BIGINT)"


@compiles(day_index, "sqlite")
def _day_index_sqlite(element: day_index, compiler: SQLCompiler, **kw: Any) -> str:
    # CAST truncates toward zero, which is floor for the non-negative times of the ledger; it
    # needs no math functions (not every SQLite build has floor()).
    return f"CAST(({compiler.process(element.clauses, **kw)}) / 86400.0 AS INTEGER)"


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
        self.counts: ColumnElement[bool] = and_(
            c.started_at < e,
            or_(c.ended_at > s, and_(c.ended_at == c.started_at, c.started_at >= s)),
        )
        self.share: ColumnElement[float] = case(
            (self.length > 0, (self.hi - self.lo) / self.length), else_=bound(1.0)
        )


def measures(share: ColumnElement[float]) -> list[ColumnElement[Any]]:
    """The aggregates every report row has, for rows weighted by ``share``: ``cost_usd``,
    ``billed_s``, ``gpu_s``, ``entries``, ``spot_savings_usd``, ``spot_cost_usd``."""
    c = LEDGER.c
    billed = c.billed_s * share
    is_spot = and_(c.pricing == "spot", c.on_demand_price_per_hour.is_not(None))
    saving = (c.on_demand_price_per_hour - c.price_per_hour) * billed / 3600.0
    zero = bound(0.0)
    return [
        func.coalesce(func.sum(c.cost_usd * share), zero).label("cost_usd"),
        func.coalesce(func.sum(billed), zero).label("billed_s"),
        func.coalesce(func.sum(billed * c.gpu_count), zero).label("gpu_s"),
        func.count().label("entries"),
        func.coalesce(func.sum(case((is_spot, saving), else_=zero)), zero).label(
            "spot_savings_usd"
        ),
        func.coalesce(
            func.sum(case((c.pricing == "spot", c.cost_usd * share), else_=zero)), zero
        ).label("spot_cost_usd"),
    ]
