"""The SQL of the cost ledger's daily rollup, ``ledger_days``
(:class:`~gpulease.state.models.LedgerDay`), called only by the ledger's writer
(:mod:`gpulease.state.ledger`, as it closes a row), by :func:`gpulease.state.migrate.upgrade`
when the rollup was never built (:func:`rollup_missing`, :func:`rebuild_days`) and by seeds that
insert rows directly.

A closed row of interval ``[started_at, ended_at)`` counts in each UTC day ``d`` it overlaps
with the share ``overlap / (ended_at - started_at)`` of each of its measures (a row of zero
length: whole, in the day of its ``started_at``; a row ending exactly at midnight is not in the
next day) — the same pro-rating as the report (:mod:`gpulease.cost.overlap`), so the sums over
whole days equal the report's sums from the rows. One ``INSERT … SELECT … ON CONFLICT DO
UPDATE`` per dimension adds (``+``) the rows' shares; SQLite and PostgreSQL alike. Moves no
states.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    String,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    literal,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import Select
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from gpulease.state.models import LedgerDay, LedgerEntry

DAY_S = 86400.0
ROWS = cast(Table, LedgerEntry.__table__)
DAYS = cast(Table, LedgerDay.__table__)
SUMS = ("cost_usd", "billed_s", "gpu_s", "spot_savings_usd", "spot_cost_usd", "cost_instance",
        "cost_volume", "cost_storage")  # fmt: skip
COUNTS = ("entries", "starts")
KINDS = ("instance", "volume", "storage")


class day_of(FunctionElement[int]):  # noqa: N801 - a SQL function, named like one
    """``floor(t / 86400)``: the UTC day number of an epoch time ``t`` (``t`` ≥ 0)."""

    type = Integer()
    inherit_cache = True
    name = "day_of"


@compiles(day_of)
def _day_of(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST(floor(({compiler.process(element.clauses, **kw)}) / 86400.0) AS INTEGER)"


@compiles(day_of, "sqlite")
def _day_of_sqlite(element: day_of, compiler: SQLCompiler, **kw: Any) -> str:
    # CAST truncates toward zero, which is floor for the non-negative times of the ledger; it
    # needs no math functions (not every SQLite build has floor())
    return f"CAST(({compiler.process(element.clauses, **kw)}) / 86400.0 AS INTEGER)"


def _text(column: ColumnElement[Any]) -> ColumnElement[str]:
    return func.coalesce(column.cast(String), literal("-"))


_Key = Callable[[Any], ColumnElement[str]]
# the report's groups (gpulease.cost.report), keyed as it shows them: values joined by "/",
# NULL as "-"; "all" is the per-day total
DIMENSIONS: dict[str, _Key] = {
    "all": lambda c: literal(""),
    "cluster": lambda c: _text(c.cluster_name),
    "job": lambda c: _text(c.job_id),
    "task": lambda c: _text(c.task_name),
    "provider": lambda c: _text(c.provider),
    "region": lambda c: _text(c.provider) + literal("/") + _text(c.region),
    "gpu": lambda c: _text(c.accelerator),
    "pricing": lambda c: _text(c.pricing),
    "user": lambda c: _text(c.user),
}


def _pairs(where: ColumnElement[bool]) -> Any:
    """(row, day) for each day each row of ``where`` overlaps, with the row's share of it."""
    c = ROWS.c
    # the day of the end, but the day before for a row of some length ending at midnight
    at_midnight = and_(c.ended_at > c.started_at, c.ended_at == day_of(c.ended_at) * DAY_S)
    last = day_of(c.ended_at) - case((at_midnight, 1), else_=0)
    rows = (
        select(c.started_at, c.ended_at, c.cost_usd, c.billed_s, c.gpu_count, c.kind, c.pricing,
               c.price_per_hour, c.on_demand_price_per_hour, c.cluster_name, c.job_id,
               c.task_name, c.provider, c.region, c.accelerator, c.user,
               day_of(c.started_at).label("first"), last.label("last"))
        .where(where)
        .cte("closing")
    )  # fmt: skip
    span = select(func.coalesce(func.max(rows.c.last - rows.c.first), 0)).scalar_subquery()
    k0 = select(literal(0, Integer).label("k")).cte("k", recursive=True)
    steps = k0.union_all(select(k0.c.k + 1).where(k0.c.k < span))
    day = rows.c.first + steps.c.k
    lo = case((rows.c.started_at > day * DAY_S, rows.c.started_at), else_=day * DAY_S)
    hi = case((rows.c.ended_at < (day + 1) * DAY_S, rows.c.ended_at), else_=(day + 1) * DAY_S)
    length = rows.c.ended_at - rows.c.started_at
    share = case((length > 0, (hi - lo) / length), else_=literal(1.0))
    return (
        select(*rows.c, day.label("day"), share.label("share"))
        .select_from(rows.join(steps, steps.c.k <= rows.c.last - rows.c.first))
        .subquery("pairs")
    )


def _sums(p: Any) -> list[ColumnElement[Any]]:
    zero = literal(0.0)
    is_spot = and_(p.c.pricing == "spot", p.c.on_demand_price_per_hour.is_not(None))
    saving = (p.c.on_demand_price_per_hour - p.c.price_per_hour) * p.c.billed_s / 3600.0
    bases: list[ColumnElement[Any]] = [
        p.c.cost_usd,
        p.c.billed_s,
        p.c.billed_s * p.c.gpu_count,
        case((is_spot, saving), else_=zero),
        case((p.c.pricing == "spot", p.c.cost_usd), else_=zero),
        *(case((p.c.kind == kind, p.c.cost_usd), else_=zero) for kind in KINDS),
    ]
    found = [func.coalesce(func.sum(b * p.c.share), zero) for b in bases]
    starts = func.sum(case((p.c.day == p.c.first, 1), else_=0))
    return [*found, func.count(), starts]


def _statement(dialect: str, dim: str, where: ColumnElement[bool]) -> Any:
    p = _pairs(where)
    key = DIMENSIONS[dim](p.c)
    chosen: Select[Any] = (
        select(literal(dim), p.c.day, key, *_sums(p)).where(literal(True)).group_by(p.c.day, key)
    )
    module: Any = postgresql if dialect == "postgresql" else sqlite
    names = ["dim", "day", "key", *SUMS, *COUNTS]
    stmt = module.insert(DAYS).from_select(names, chosen)
    return stmt.on_conflict_do_update(
        index_elements=["dim", "day", "key"],
        set_={n: DAYS.c[n] + stmt.excluded[n] for n in (*SUMS, *COUNTS)},
    )


def _add(conn: Connection, where: ColumnElement[bool]) -> None:
    for dim in DIMENSIONS:
        conn.execute(_statement(conn.dialect.name, dim, where))


@functools.cache
def _by_ids(dialect: str, dim: str) -> Any:
    """The statement of ``dim`` for the rows of the bound ``ids``, built once per dialect
    (building one costs ~1 ms of Python; SQLAlchemy also caches its compiled form)."""
    return _statement(dialect, dim, ROWS.c.id.in_(bindparam("ids", expanding=True)))


def add_days(conn: Connection, *entry_ids: int) -> None:
    """Add the closed rows ``entry_ids`` to each day they overlap (once: the writer calls this
    in the transaction that closes them)."""
    if not entry_ids:
        return
    for dim in DIMENSIONS:
        conn.execute(_by_ids(conn.dialect.name, dim), {"ids": list(entry_ids)})


def rollup_missing(conn: Connection) -> bool:
    """Whether the rollup is empty while closed rows exist (every closed row adds at least its
    ``all`` day): it was never built, e.g. for a ledger written before migration 0009."""
    if conn.execute(select(DAYS.c.id).limit(1)).first() is not None:
        return False
    return (
        conn.execute(select(ROWS.c.id).where(ROWS.c.closed.is_(True)).limit(1)).first() is not None
    )


def rebuild_days(conn: Connection) -> None:
    """The rollup from scratch, from every closed row (the same statements, over all of them)."""
    conn.execute(delete(DAYS))
    _add(conn, ROWS.c.closed.is_(True))
