"""Accrual: the controller's writes to the cost ledger, through :mod:`gpulease.state.ledger`.

Once per cluster-loop pass (:meth:`Accrual.run`, after the clusters' steps) every node not yet
TERMINATED, and every open ledger row, is brought up to *now* from timestamps:

- a node bills (an ``instance`` row) from when the provider reports it running — the pass that
  first sees its instance RUNNING (:meth:`Accrual.seen_running`, from the reconciler's snapshot)
  or sees the node past PROVISIONING — or from its creation, for a provider whose ``billing``
  rule has ``,request``; until its termination is confirmed (the node TERMINATED);
- a STOPPED node bills its volumes (a ``volume`` row: the launch's ``disk_gb`` × the provider's
  ``volume_usd_per_gb_month`` / 730 per hour) where the provider has that price;
- the open row's end is advanced to now (never back), so a pass repeated bills nothing twice and
  a server that was down for an hour bills that hour on its first pass back;
- the price in force: the plan's price (per node) on demand; for spot the provider's price as it
  changes — a provider with :class:`~gpulease.providers.base.SupportsPriceHistory` (the sim)
  gives each change's instant, and the row closes there and the next opens at the new price;
  one with only :class:`~gpulease.providers.base.SupportsSpotMarket` prices the row at opening;
  others (AWS, Slurm, local) bill the quoted price.

Times are each provider's market clock where it has one (the sim's scaled clock, as the managed
jobs' spend), else the server's. Moves no statuses; writes only ledger rows.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, or_, select
from sqlalchemy.orm import Session

from gpulease.billing import HOURS_PER_MONTH, Billing
from gpulease.clock import Clock
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
    change_price,
    close,
    open_entries,
    open_entry,
)
from gpulease.state.models import Cluster, LedgerEntry, Node

log = logging.getLogger("gpulease.controller.accrual")

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
        """One accrual pass; the number of ledger rows written."""
        with session_scope(self.engine) as session:
            rows = {r.node_id: r for r in open_entries(session) if r.node_id is not None}
            stmt = (
                select(Node, Cluster)
                .join(Cluster, Cluster.id == Node.cluster_id)
                .where(or_(Node.state != _N.TERMINATED, Node.id.in_(list(rows))))
                .order_by(Node.id)
            )
            moved = 0
            now_of: dict[str, float] = {}
            live: set[int] = set()
            for node, cluster in session.execute(stmt):
                live.add(node.id)
                provider = self.providers.get(node.provider)
                if provider is None:
                    rows.pop(node.id, None)
                    continue  # not configured here: leave its row as it is
                if node.provider not in now_of:
                    now_of[node.provider] = self.clock_of(provider).now()
                now = now_of[node.provider]
                row = rows.pop(node.id, None)
                moved += self._node(session, provider, node, cluster, row=row, now=now)
            for row in rows.values():  # its node row is gone: nothing more is known
                moved += close(row, row.ended_at, now=row.ended_at)
            self._running = {k: v for k, v in self._running.items() if k in live}
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
        rule = Billing.parse(provider.billing)
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
            facts = self._facts(provider, node, cluster, want, rule, at=min(start, now))
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
        for at, price in self._changes(provider, row, now):
            nxt = change_price(session, row, at, price, now=now)
            moved += nxt is not row
            row = nxt
        return moved + advance(row, now, now=now)

    def _changes(
        self, provider: Provider, row: LedgerEntry, now: float
    ) -> list[tuple[float, float]]:
        quoted = row.quoted_per_hour
        if row.kind != "instance" or row.pricing != "spot" or quoted is None:
            return []
        if not isinstance(provider, SupportsPriceHistory) or now <= row.ended_at:
            return []
        try:
            return provider.spot_price_changes(
                row.region, row.zone, row.instance_type, quoted, after=row.ended_at, until=now
            )
        except GpuleaseError as exc:
            log.info("%s: no spot price history: %s", provider.name, exc)
            return []

    def _facts(
        self,
        provider: Provider,
        node: Node,
        cluster: Cluster,
        kind: str,
        rule: Billing,
        *,
        at: float,
    ) -> EntryFacts:
        quoted = (cluster.price_per_hour or 0.0) / max(1, cluster.num_nodes)
        price, quantity = quoted, None
        if kind == "volume":
            quantity = _disk_gb(cluster)
            price = (quantity or 0.0) * (provider.volume_usd_per_gb_month or 0.0) / HOURS_PER_MONTH
        elif cluster.pricing == "spot" and isinstance(provider, SupportsSpotMarket):
            price = self._spot_price(provider, cluster, quoted)
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
            on_demand_price_per_hour=_on_demand_price(cluster) if kind == "instance" else None,
            quantity=quantity,
            quoted_per_hour=quoted if kind == "instance" else None,
        )

    def _spot_price(self, provider: SupportsSpotMarket, cluster: Cluster, quoted: float) -> float:
        try:
            found = provider.spot_price(cluster.region, cluster.zone, cluster.instance_type, quoted)
        except GpuleaseError:
            found = None
        return quoted if found is None else found


def _disk_gb(cluster: Cluster) -> float | None:
    run: Any = (cluster.task or {}).get("run") or {}
    value = run.get("disk_gb") if isinstance(run, dict) else None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _on_demand_price(cluster: Cluster) -> float | None:
    """Per node: the cluster's own price on demand, or the price of an on-demand plan of the
    same offer in its launch document (the spot savings' reference); None when unknown."""
    if cluster.pricing == "on_demand" and cluster.price_per_hour is not None:
        return cluster.price_per_hour / max(1, cluster.num_nodes)
    for plan in (cluster.task or {}).get("plans") or []:
        if not isinstance(plan, dict) or plan.get("pricing") != "on_demand":
            continue
        same = all(
            plan.get(k) == getattr(cluster, k) for k in ("provider", "region", "instance_type")
        )
        if same and plan.get("price_per_hour") is not None:
            return float(plan["price_per_hour"]) / max(1, int(plan.get("num_nodes") or 1))
    return None
