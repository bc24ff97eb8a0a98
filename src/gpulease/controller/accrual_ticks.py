"""The accrual's in-place advances: which open ledger rows the database advances by itself, and
when.

Most open rows only move on: a billed node's ``instance`` row on a per-second rule (``second``
/ ``second:M``, whose arithmetic SQL computes exactly as :meth:`gpulease.billing.Billing.billed`
does), not a spot row of a provider with a price history (those may split at a change, so the
accrual looks at each). Such rows are *bulk* rows: :class:`Ticks` advances them with
:func:`gpulease.state.ledger.advance_in_place`, in ``SLICES`` slices by node id, each slice once
per ``every_s`` of its provider's clock at its own offset — so a pass writes about
``1 / SLICES`` of them rather than all of them every ``every_s``, and a pass between two slices'
ticks writes none. The first pass after a start advances every slice at once (one statement).
:func:`bulk_rows` is the same rule as a SQL condition, so the accrual's scan leaves those rows
out. Writes only ledger rows, through the ledger's writer; moves no states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.orm import Session

from gpulease.billing import billing_rule
from gpulease.providers.base import Provider, SupportsPriceHistory
from gpulease.state import NodeState
from gpulease.state.ledger import advance_in_place
from gpulease.state.models import LedgerEntry, Node

SLICES = 10


def per_second(provider: Provider) -> bool:
    return billing_rule(provider.billing).unit_s == 1.0


def bulk_rows(provider: Provider, billed: frozenset[NodeState]) -> ColumnElement[bool] | None:
    """The bulk rows of ``provider`` as a condition on the scan's join of nodes with their
    open row (None: the provider has none)."""
    if not per_second(provider):
        return None
    e = LedgerEntry
    found = and_(e.kind == "instance", Node.state.in_(billed), e.billing == provider.billing)
    if isinstance(provider, SupportsPriceHistory):
        found = and_(found, or_(e.pricing != "spot", e.quoted_per_hour.is_(None)))
    return found


@dataclass
class Ticks:
    """Each provider's slices and the tick each was last advanced at (this server's memory)."""

    every_s: float
    billed: frozenset[NodeState]
    _last: dict[tuple[str, int], int] = field(default_factory=dict)

    def advance(
        self, session: Session, providers: Mapping[str, Provider], now_of: Mapping[str, float]
    ) -> int:
        """Advance the slices whose tick has come to their provider's now; rows advanced."""
        moved = 0
        for name, provider in providers.items():
            if not per_second(provider):
                continue
            now = now_of[name]
            due = [s for s in range(SLICES) if self._last.get((name, s)) != self._tick(now, s)]
            if not due:
                continue
            moved += self._update(session, name, provider, now, None if len(due) == SLICES else due)
            for s in due:
                self._last[(name, s)] = self._tick(now, s)
        return moved

    def _tick(self, now: float, slice_: int) -> int:
        return math.floor((now - slice_ * self.every_s / SLICES) / self.every_s)

    def _update(
        self, session: Session, name: str, provider: Provider, now: float, slices: list[int] | None
    ) -> int:
        nodes = select(Node.id).where(Node.provider == name, Node.state.in_(self.billed))
        if slices is not None:
            nodes = nodes.where((Node.id % SLICES).in_(slices))
        return advance_in_place(
            session,
            provider=name,
            billing=provider.billing,
            to=now,
            nodes=nodes,
            skip_spot=isinstance(provider, SupportsPriceHistory),
        )
