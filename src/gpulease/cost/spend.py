"""A budget's spend: the dollars the ledger (``ledger_entries``, read only) holds for a scope in a
period.

A row counts by its overlap with the period [start, end): its ``cost_usd`` times the share of its
interval inside the period (a row from 23:00 to 01:00 counts half in each day); a row of no length
(a minimum charge) counts whole in the period its start falls in. The sum is one SQL aggregate,
grouped by the scope's dimensions (provider, task name, user), and the groups the scope matches
are added up here, so a task-name glob has ``fnmatch`` semantics on every database. Moves no
states.
"""

from __future__ import annotations

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session

from gpulease.cost.budgets import BudgetScope
from gpulease.state.models import LedgerEntry

_L = LedgerEntry


Group = tuple[str, str | None, str, float]


def spend_by_scope(session: Session, start: float, end: float) -> list[Group]:
    """(provider, task name, user, dollars) of every group with rows in [start, end)."""
    lo = case((_L.started_at < start, start), else_=_L.started_at)
    hi = case((_L.ended_at > end, end), else_=_L.ended_at)
    length = _L.ended_at - _L.started_at
    share = case(
        (length <= 0, _L.cost_usd),
        (and_(_L.started_at >= start, _L.ended_at <= end), _L.cost_usd),
        else_=_L.cost_usd * (hi - lo) / length,
    )
    overlaps = and_(
        _L.started_at < end,
        or_(_L.ended_at > start, and_(length <= 0, _L.started_at >= start)),
    )
    stmt = (
        select(_L.provider, _L.task_name, _L.user, func.sum(share))
        .where(overlaps)
        .group_by(_L.provider, _L.task_name, _L.user)
    )
    return [(p, t, u, float(s or 0.0)) for p, t, u, s in session.execute(stmt)]


def scope_spend(session: Session, scope: BudgetScope, start: float, end: float) -> float:
    """The dollars of ``scope`` in [start, end)."""
    return sum(
        dollars
        for provider, task, user, dollars in spend_by_scope(session, start, end)
        if scope.matches(provider=provider, task_name=task, user=user)
    )
