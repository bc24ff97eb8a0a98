"""Accrual: the controller's writes to the cost ledger, through :mod:`gpulease.state.ledger`.

Once per cluster-loop pass (:meth:`Accrual.run`, after the clusters' steps) every node not yet
TERMINATED, and every open ledger row, is brought up to *now* from timestamps:

- a node bills (an ``instance`` row) from when the provider reports it running — the pass that
  first sees its instance RUNNING (:meth:`Accrual.seen_running`, from the reconciler's snapshot)
  or sees the node past PROVISIONING — or from its creation, for a provider whose ``billing``
  rule has ``,request``; until its termination is confirmed (the node TERMINATED);
- a STOPPED node bills its volumes (a ``volume`` row: the launch's ``disk_gb`` × the provider's
  ``volume_usd_per_gb_month`` / 730 per hour) where the provider has that price;
- the open row's end is advanced to now (never back; once every ``ADVANCE_EVERY_S`` of its
  clock while nothing else changes — per-second rows by the database, in slices:
  :mod:`~gpulease.controller.accrual_ticks`), so a pass repeated bills nothing twice and a
  server that was down for an hour bills that hour on its first pass back;
- the price in force: the plan's price (per node) on demand; for spot the provider's price as it
  changes — a provider with :class:`~gpulease.providers.base.SupportsPriceHistory` (the sim)
  gives each change's instant, and the row closes there and the next opens at the new price;
  one with only :class:`~gpulease.providers.base.SupportsSpotMarket` prices the row at opening;
  one with only ``SupportsPriceHistory`` (AWS) opens the row at the last change it knows (the
  price in force), else the quote; others (Slurm, local) bill the quoted price.

Times are each provider's market clock where it has one (the sim's scaled clock, as the managed
jobs' spend), else the server's. Moves no statuses; writes only ledger rows.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, and_, exists, not_, or_, select
from sqlalchemy.orm import Session

from gpulease.billing import HOURS_PER_MONTH, Billing, billing_rule
from gpulease.clock import Clock
from gpulease.controller.accrual_ticks import Ticks, bulk_rows
from gpulease.controller.snapshot import Snapshot
from gpulease.errors import GpuleaseError
from gpulease.providers.base import (
    InstanceState,
    Provider,
    SupportsPriceHistory,
    SupportsSpotMarket,
)
from gpulease.state import NodeState, session_scope
from gpulease.state.ledger import (
    EntryFacts,
    advance,
    advance_open_rows,
    change_price,
    close,
    open_entry,
)
from gpulease.state.models import Cluster, Job, LedgerEntry, Node

log = logging.getLogger("gpulease.controller.accrual")

# an open row whose node carries on is rewritten once this many seconds of its clock have passed
# (a pass writes nothing for most nodes); a close, an opening or a price split never waits
ADVANCE_EVERY_S = 5.0

_N = NodeState
BILLED = frozenset(
    {_N.SETTING_UP, _N.READY, _N.LOST, _N.PREEMPTED, _N.STOPPING, _N.STARTING, _N.FAILED,
     _N.TERMINATING}
)  # fmt: skip


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "unknown"


@dataclass
class Accrual:
    """Brings the ledger up to now; one per server (the single writer of ledger rows)."""

    engine: Engine
    providers: Mapping[str, Provider]
    clock: Clock
    user: str = field(default_factory=os_user)
    _running: dict[int, float] = field(default_factory=dict)  # node id → seen running at
    _ticks: Ticks = field(default_factory=lambda: Ticks(ADVANCE_EVERY_S, BILLED))
    _orphans_at: float = float("-inf")  # open rows of deleted nodes: looked for this often

    def clock_of(self, provider: Provider | None) -> Clock:
        if isinstance(provider, SupportsSpotMarket):
            return provider.market_clock
        return self.clock

    def seen_running(self, snap: Snapshot) -> None:
        """Note the PROVISIONING nodes whose instance the provider lists RUNNING (their billing
        starts there, before their agent answers)."""
        if snap.instances is None:
            return
        for node in snap.nodes:
            listed = snap.instances.get(node.instance_id)
            if node.state is _N.PROVISIONING and listed and listed.state is InstanceState.RUNNING:
                at = self.clock_of(self.providers.get(node.provider)).now()
                self._running.setdefault(node.id, at)

    def run(self) -> int:
        """One accrual pass; the number of ledger rows written. Open rows that only move on
        (the common case) are advanced by the database in slices (:class:`Ticks`) or in one
        batch of UPDATEs; openings, closings and price splits go through the ORM, node by
        node."""
        with session_scope(self.engine) as session:
            now_of = {name: self.clock_of(p).now() for name, p in self.providers.items()}
            moved = self._ticks.advance(session, self.providers, now_of)
            batch, slow, live = self._scan(session, now_of)
            moved += advance_open_rows(session, batch)
            if slow:
                moved += self._slow(session, slow)
            if self.clock.now() - self._orphans_at >= ADVANCE_EVERY_S:
                self._orphans_at = self.clock.now()
                for row in _orphans(session):  # its node row is gone: nothing more is known
                    moved += close(row, row.ended_at, now=row.ended_at)
            self._running = {k: v for k, v in self._running.items() if k in live}
            return moved

    def _scan(
        self, session: Session, now_of: Mapping[str, float]
    ) -> tuple[list[tuple[Any, ...]], dict[int, float], set[int]]:
        """(rows to advance as they are, nodes needing more — with their provider's now —,
        every node seen). The database leaves out the rows with nothing to do: a billed node's
        open instance row not yet due, and the rows :class:`Ticks` advances."""
        e = LedgerEntry
        due = []
        for name, now in now_of.items():
            condition = and_(Node.provider == name, e.ended_at <= now - ADVANCE_EVERY_S)
            bulk = bulk_rows(self.providers[name], BILLED)
            due.append(condition if bulk is None else and_(condition, not_(bulk)))
        something_to_do = or_(e.id.is_(None), e.kind != "instance", Node.state.not_in(BILLED), *due)
        stmt = (
            select(
                Node.id,
                Node.state,
                Node.provider,
                e.id,
                e.kind,
                e.pricing,
                e.quoted_per_hour,
                e.region,
                e.zone,
                e.instance_type,
                e.started_at,
                e.ended_at,
                e.run_started_at,
                e.billing,
                e.price_per_hour,
            )
            .outerjoin(e, and_(e.node_id == Node.id, e.closed.is_(False)))
            .where(or_(Node.state != _N.TERMINATED, e.id.is_not(None)))
            .where(Node.provider.in_(list(now_of)), something_to_do)
        )
        batch: list[tuple[Any, ...]] = []
        slow: dict[int, float] = {}
        live: set[int] = set()
        for node_id, state, name, row_id, kind, pricing, quoted, *rest in session.execute(stmt):
            live.add(node_id)
            provider = self.providers.get(name)
            if provider is None:
                continue  # not configured here: leave its row as it is
            now = now_of[name]
            want = self._quick_want(provider, node_id, state)
            if row_id is None:
                if want is not None:
                    slow[node_id] = now
                continue
            region, zone, itype, started, ended, run, billing, price = rest
            if kind == want and now - ended < ADVANCE_EVERY_S:
                continue  # nothing new to write yet (closing and opening never wait)
            changes = []
            if kind == "instance" and pricing == "spot" and quoted is not None:
                changes = self._changes(provider, region=region, zone=zone, instance_type=itype,
                                        quoted=quoted, after=ended, until=now)  # fmt: skip
            if kind != want or changes:
                slow[node_id] = now
                continue
            batch.append((row_id, now, started, run, billing, price))
        return batch, slow, live

    def _quick_want(self, provider: Provider, node_id: int, state: NodeState) -> str | None:
        """What the node bills by its state alone (``volume`` is checked again with the
        cluster's disk size on the slow path)."""
        if state in BILLED:
            return "instance"
        if state is _N.PROVISIONING:
            rule = billing_rule(provider.billing)
            return "instance" if rule.from_request or node_id in self._running else None
        if state is _N.STOPPED and provider.volume_usd_per_gb_month:
            return "volume"
        return None

    def _slow(self, session: Session, slow: Mapping[int, float]) -> int:
        rows = {
            r.node_id: r
            for r in session.scalars(
                select(LedgerEntry).where(
                    LedgerEntry.closed.is_(False), LedgerEntry.node_id.in_(list(slow))
                )
            )
        }
        stmt = (
            select(Node, Cluster)
            .join(Cluster, Cluster.id == Node.cluster_id)
            .where(Node.id.in_(list(slow)))
            .order_by(Node.id)
        )
        moved = 0
        for node, cluster in session.execute(stmt):
            provider = self.providers[node.provider]
            row = rows.get(node.id)
            moved += self._node(session, provider, node, cluster, row=row, now=slow[node.id])
        return moved

    def _node(
        self,
        session: Session,
        provider: Provider,
        node: Node,
        cluster: Cluster,
        *,
        row: LedgerEntry | None,
        now: float,
    ) -> int:
        rule = billing_rule(provider.billing)
        want = self._wanted(provider, node, cluster, rule)
        moved = 0
        if row is not None and row.kind != want:
            moved += close(row, now, now=now)
            row = None
        if want is None:
            self._running.pop(node.id, None)
            return moved
        if row is None:
            start = self._running.pop(node.id, now) if want == "instance" else now
            facts = self._facts(session, provider, node, cluster, want, now=now)
            open_entry(session, facts, started_at=min(start, now), now=now)
            return moved + 1
        return moved + self._advance(session, provider, row, now)

    def _wanted(
        self, provider: Provider, node: Node, cluster: Cluster, rule: Billing
    ) -> str | None:
        state = node.state
        if state in BILLED:
            return "instance"
        if state is _N.PROVISIONING and (rule.from_request or node.id in self._running):
            return "instance"
        if state is _N.STOPPED and provider.volume_usd_per_gb_month and _disk_gb(cluster):
            return "volume"
        return None

    def _advance(self, session: Session, provider: Provider, row: LedgerEntry, now: float) -> int:
        """Split the open row at each spot price change since its end, then advance it."""
        moved = 0
        changes: list[tuple[float, float]] = []
        if row.kind == "instance" and row.pricing == "spot" and row.quoted_per_hour is not None:
            changes = self._changes(provider, region=row.region, zone=row.zone,
                                    instance_type=row.instance_type, quoted=row.quoted_per_hour,
                                    after=row.ended_at, until=now)  # fmt: skip
        for at, price in changes:
            nxt = change_price(session, row, at, price, now=now)
            moved += nxt is not row
            row = nxt
        return moved + advance(row, now, now=now)

    def _changes(
        self,
        provider: Provider,
        *,
        region: str | None,
        zone: str | None,
        instance_type: str | None,
        quoted: float,
        after: float,
        until: float,
    ) -> list[tuple[float, float]]:
        """The spot price changes in ``(after, until]`` where the provider knows them."""
        if not isinstance(provider, SupportsPriceHistory) or until <= after:
            return []
        try:
            return provider.spot_price_changes(
                region, zone, instance_type, quoted, after=after, until=until
            )
        except GpuleaseError as exc:
            log.info("%s: no spot price history: %s", provider.name, exc)
            return []

    def _facts(
        self, session: Session, provider: Provider, node: Node, cluster: Cluster, kind: str,
        *, now: float,
    ) -> EntryFacts:  # fmt: skip
        quoted = (cluster.price_per_hour or 0.0) / max(1, cluster.num_nodes)
        price, quantity = quoted, None
        if kind == "volume":
            quantity = _disk_gb(cluster)
            price = (quantity or 0.0) * (provider.volume_usd_per_gb_month or 0.0) / HOURS_PER_MONTH
        elif cluster.pricing == "spot" and isinstance(provider, SupportsSpotMarket):
            price = self._spot_price(provider, cluster, quoted)
        elif cluster.pricing == "spot" and isinstance(provider, SupportsPriceHistory):
            known = self._changes(provider, region=cluster.region, zone=cluster.zone,
                                  instance_type=cluster.instance_type, quoted=quoted,
                                  after=0.0, until=now)  # fmt: skip
            price = known[-1][1] if known else quoted  # the last change known: in force now
        spec = (cluster.task or {}).get("spec") or {}
        return EntryFacts(
            kind=kind,
            subject=str(node.id),
            user=self.user,
            provider=node.provider,
            pricing=cluster.pricing if kind == "instance" else "on_demand",
            price_per_hour=price,
            billing=provider.billing,
            node_id=node.id,
            instance_id=node.instance_id,
            cluster_id=cluster.id,
            cluster_name=cluster.name,
            job_id=cluster.job_id,
            task_name=spec.get("name") if isinstance(spec, dict) else None,
            region=cluster.region,
            zone=cluster.zone,
            instance_type=cluster.instance_type,
            accelerator=cluster.accelerator,
            gpu_count=cluster.gpus_per_node if kind == "instance" else 0,
            on_demand_price_per_hour=_on_demand_price(session, cluster)
            if kind == "instance"
            else None,
            quantity=quantity,
            quoted_per_hour=quoted if kind == "instance" else None,
        )

    def _spot_price(self, provider: SupportsSpotMarket, cluster: Cluster, quoted: float) -> float:
        try:
            found = provider.spot_price(cluster.region, cluster.zone, cluster.instance_type, quoted)
        except GpuleaseError:
            found = None
        return quoted if found is None else found


def _orphans(session: Session) -> list[LedgerEntry]:
    """Open node rows whose node row is gone (its cluster deleted)."""
    gone = ~exists().where(Node.id == LedgerEntry.node_id)
    stmt = select(LedgerEntry).where(
        LedgerEntry.closed.is_(False), LedgerEntry.node_id.is_not(None), gone
    )
    return list(session.scalars(stmt))


def _disk_gb(cluster: Cluster) -> float | None:
    run: Any = (cluster.task or {}).get("run") or {}
    value = run.get("disk_gb") if isinstance(run, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _on_demand_price(session: Session, cluster: Cluster) -> float | None:
    """Per node: the cluster's own price on demand, or the price of an on-demand plan of the
    same offer in its launch document or its managed job's targets (the spot savings'
    reference); None when unknown."""
    if cluster.pricing == "on_demand" and cluster.price_per_hour is not None:
        return cluster.price_per_hour / max(1, cluster.num_nodes)
    plans = list((cluster.task or {}).get("plans") or [])
    job = session.get(Job, cluster.job_id) if cluster.job_id is not None else None
    if job is not None:
        plans += list((job.task or {}).get("on_demand") or [])
    for plan in plans:
        if not isinstance(plan, dict) or plan.get("pricing") != "on_demand":
            continue
        same = all(
            plan.get(k) == getattr(cluster, k) for k in ("provider", "region", "instance_type")
        )
        if same and plan.get("price_per_hour") is not None:
            return float(plan["price_per_hour"]) / max(1, int(plan.get("num_nodes") or 1))
    return None
