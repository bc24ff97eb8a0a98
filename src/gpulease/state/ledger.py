"""The cost ledger's writer: the only code that inserts or updates ``ledger_entries``.

A row is one billed interval at one price (:class:`~gpulease.state.models.LedgerEntry`). This
module opens a row (:func:`open_entry`, idempotent by ``entry_key``), advances an open row's end
(:func:`advance`: to a later time only, so a repeated or delayed pass bills each second once),
closes it (:func:`close`) and starts the next at a price change (:func:`change_price`: the old
row closes at the change's instant, the new one opens there). ``billed_s`` and ``cost_usd`` are
recomputed from the row's interval and its ``billing`` rule every time the row moves.

Billing rules (:class:`gpulease.billing.Billing`, the ``billing`` column) apply per *run* (a
node's continuous billing from ``run_started_at``: one launch, or one start after a stop).

A row's ``billed_s`` is ``R(ended_at - run) - R(started_at - run)`` where ``R`` is the rule on
the run's elapsed time, so the rows of one run sum to the rule applied to the whole run, however
price changes split it. ``cost_usd = billed_s × price_per_hour / 3600``.

Closing a row also adds its share of each UTC day to the daily rollup ``ledger_days``
(:mod:`gpulease.state.ledger_days`, in the same transaction) that ``gpulease cost`` reads; a
closed row never changes again, and open rows are not in the rollup.

Moves no statuses; reads nothing but its own tables.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Float,
    Select,
    Table,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, object_session

from gpulease.billing import BadBillingRule, Billing, billing_rule
from gpulease.state.ledger_days import add_days, rebuild_days
from gpulease.state.models import LedgerEntry

__all__ = ["BadBillingRule", "Billing", "rebuild_days"]  # re-exported

KINDS = frozenset({"instance", "volume", "storage"})


@dataclass(frozen=True, slots=True)
class EntryFacts:
    """What a row bills and its dimensions, copied onto the row (no foreign keys)."""

    kind: str
    subject: str  # the node id (instance / volume) or the job / store (storage): in entry_key
    user: str
    provider: str
    pricing: str
    price_per_hour: float
    billing: str
    node_id: int | None = None
    instance_id: str | None = None
    cluster_id: int | None = None
    cluster_name: str | None = None
    job_id: int | None = None
    service: str | None = None
    task_name: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = None
    gpu_count: int = 0
    on_demand_price_per_hour: float | None = None
    quoted_per_hour: float | None = None
    quantity: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"ledger kind {self.kind!r}: one of {', '.join(sorted(KINDS))}")
        Billing.parse(self.billing)


def entry_key(kind: str, subject: str, started_at: float) -> str:
    """The unique key of the row of ``subject`` starting at ``started_at`` (ms precision)."""
    return f"{kind}:{subject}:{started_at:.3f}"


def entry_subject(key: str) -> str:
    """The subject of an :func:`entry_key`: what stands between the kind (before the first
    ``:``) and the start time (after the last ``:``) — a subject may hold ``:`` itself (a store
    URL ``s3://bucket/x``, a ``sha256:`` digest)."""
    return key.split(":", 1)[1].rsplit(":", 1)[0]


def _recompute(entry: LedgerEntry) -> None:
    rule = billing_rule(entry.billing)
    run = entry.run_started_at
    entry.billed_s = rule.billed(entry.ended_at - run) - rule.billed(entry.started_at - run)
    entry.cost_usd = entry.billed_s * entry.price_per_hour / 3600.0


def open_entry(
    session: Session,
    facts: EntryFacts,
    *,
    started_at: float,
    now: float,
    run_started_at: float | None = None,
) -> LedgerEntry:
    """The row of ``facts`` starting at ``started_at`` — the existing one when its key is
    already there (a repeated pass inserts nothing). ``run_started_at`` defaults to
    ``started_at`` (a new run)."""
    key = entry_key(facts.kind, facts.subject, started_at)
    found = session.scalar(select(LedgerEntry).where(LedgerEntry.entry_key == key))
    if found is not None:
        return found
    values: dict[str, Any] = {f.name: getattr(facts, f.name) for f in fields(facts)}
    del values["subject"]
    entry = LedgerEntry(
        entry_key=key,
        run_started_at=started_at if run_started_at is None else run_started_at,
        started_at=started_at,
        ended_at=started_at,
        closed=False,
        billed_s=0.0,
        cost_usd=0.0,
        created_at=now,
        updated_at=now,
        **values,
    )
    _recompute(entry)
    session.add(entry)
    session.flush()
    return entry


def advance(entry: LedgerEntry, to: float, *, now: float) -> bool:
    """Move an open row's end to ``to``; a no-op (False) for a closed row or a time not later
    than its end."""
    if entry.closed or to <= entry.ended_at:
        return False
    entry.ended_at = to
    entry.updated_at = now
    _recompute(entry)
    return True


def close(entry: LedgerEntry, at: float, *, now: float) -> bool:
    """Advance the row to ``at`` (never back) and close it; False when it was closed already."""
    if entry.closed:
        return False
    advance(entry, at, now=now)
    entry.closed = True
    entry.updated_at = now
    _roll_up(entry)
    return True


def _roll_up(entry: LedgerEntry) -> None:
    """Add the row just closed to the daily rollup (``ledger_days``), in its transaction."""
    session = object_session(entry)
    if session is None:
        raise ValueError(f"ledger row {entry.entry_key!r} closed outside a session")
    session.flush()
    connection: Connection = session.connection()
    add_days(connection, entry.id)


def change_price(
    session: Session, entry: LedgerEntry, at: float, price_per_hour: float, *, now: float
) -> LedgerEntry:
    """Close ``entry`` at ``at`` and open the next row of the same run at the new price (the
    open row itself when its price is already that); idempotent by the new row's key."""
    if price_per_hour == entry.price_per_hour and not entry.closed:
        return entry
    at = max(at, entry.started_at)
    close(entry, at, now=now)
    return open_entry(
        session,
        replace_facts(entry, price_per_hour=price_per_hour),
        started_at=at,
        now=now,
        run_started_at=entry.run_started_at,
    )


def replace_facts(entry: LedgerEntry, **changes: Any) -> EntryFacts:
    """The facts of ``entry`` (its dimensions and price), with ``changes``."""
    names = [f.name for f in fields(EntryFacts) if f.name != "subject"]
    values: dict[str, Any] = {name: getattr(entry, name) for name in names}
    values["subject"] = entry_subject(entry.entry_key)
    values.update(changes)
    return EntryFacts(**values)


def open_entries(session: Session) -> list[LedgerEntry]:
    """Every open row, oldest first."""
    stmt = select(LedgerEntry).where(LedgerEntry.closed.is_(False)).order_by(LedgerEntry.id)
    return list(session.scalars(stmt))


def job_spend(session: Session, job_id: int) -> float:
    """Dollars the ledger holds for managed job ``job_id`` (every attempt, every kind)."""
    stmt = select(func.coalesce(func.sum(LedgerEntry.cost_usd), 0.0)).where(
        LedgerEntry.job_id == job_id
    )
    return float(session.scalar(stmt) or 0.0)


LABELS = ("cluster_name", "job_id", "provider", "region", "instance_type", "pricing")


def accrued_by_labels(session: Session) -> list[tuple[tuple[Any, ...], float]]:
    """Σ ``cost_usd`` grouped by the /metrics labels (:data:`LABELS`)."""
    columns = [getattr(LedgerEntry, name) for name in LABELS]
    stmt = select(*columns, func.sum(LedgerEntry.cost_usd)).group_by(*columns)
    return [(tuple(row[:-1]), float(row[-1] or 0.0)) for row in session.execute(stmt)]


def advance_open_rows(session: Session, batch: list[tuple[Any, ...]]) -> int:
    """Advance open rows, given as (id, to, started_at, run_started_at, billing, price), in one
    executemany (the accrual's batch: rows that only move on); a row closed or advanced
    meanwhile is left alone (the WHERE). The number of rows asked to move."""
    if not batch:
        return 0
    params = []
    for row_id, to, started, run, billing, price in batch:
        rule = billing_rule(billing)
        billed = rule.billed(to - run) - rule.billed(started - run)
        params.append({"b_id": row_id, "b_to": to, "b_billed": billed,
                       "b_cost": billed * price / 3600.0})  # fmt: skip
    table = cast(Table, LedgerEntry.__table__)
    stmt = (
        update(table)
        .where(table.c.id == bindparam("b_id"), table.c.closed.is_(False))
        .where(table.c.ended_at < bindparam("b_to"))
        .values(
            ended_at=bindparam("b_to"),
            billed_s=bindparam("b_billed"),
            cost_usd=bindparam("b_cost"),
            updated_at=bindparam("b_to"),
        )
    )
    session.execute(stmt, params)
    return len(params)


def advance_in_place(
    session: Session,
    *,
    provider: str,
    billing: str,
    to: float,
    nodes: Select[int],
    skip_spot: bool = False,
) -> int:
    """Advance to ``to``, in one UPDATE computed by the database, every open ``instance`` row of
    ``provider`` with rule ``billing`` that ends before ``to`` and whose node is in ``nodes`` (a
    SELECT of node ids; ``skip_spot``: not the spot rows, which need their price history looked
    at). Only for per-second rules (``second`` / ``second:M``): their arithmetic
    is the same in SQL as in :meth:`Billing.billed`; other rules return 0 and are left to
    :func:`advance_open_rows`. The number of rows advanced."""
    rule = billing_rule(billing)
    if rule.unit_s != 1.0:
        return 0
    table = cast(Table, LedgerEntry.__table__)
    c = table.c

    def billed(elapsed: Any) -> Any:
        return case((elapsed <= 0, 0.0), (elapsed < rule.minimum_s, rule.minimum_s), else_=elapsed)

    end = literal(to, Float)
    billed_s = billed(end - c.run_started_at) - billed(c.started_at - c.run_started_at)
    stmt = (
        update(table)
        .where(c.closed.is_(False), c.kind == "instance", c.provider == provider)
        .where(c.billing == billing, c.ended_at < to, c.node_id.in_(nodes))
        .values(
            ended_at=end,
            billed_s=billed_s,
            cost_usd=billed_s * c.price_per_hour / 3600.0,
            updated_at=end,
        )
    )
    if skip_spot:
        stmt = stmt.where(or_(c.pricing != "spot", c.quoted_per_hour.is_(None)))
    result = session.execute(stmt.execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)
