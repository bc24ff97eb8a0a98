"""SLA availability and credits (``gpulease sla``, ``GET /v1/sla``): per provider and region, the
month's availability of the nodes gpulease rented against the promise in the config, the
breaches and the credit owed under the configured clause (docs/cost-sla.md).

Reads, never writes: ``ledger_entries`` (``kind`` instance: the billed node time and the hourly
fee), ``status_changes`` (the nodes', clusters' and jobs' histories) and ``provider_outages``
(the provider API's outages, migration 0008). Moves no states.

A breach is (1) a node the provider lost while it served — its instance no longer listed, or
LOST past its timeout — that was neither preempted nor priced spot (spot capacity may be taken
back) nor taken down at our request; it lasts until a replacement node of its cluster or job
is ready, a user, a budget or autostop stops or takes down the cluster, a user cancels the job,
or the month ends; (2) a node whose agent stayed unreachable (LOST) while billed, until it
answers again, unless it turns out preempted; (3) the provider's API unavailable for longer
than the window while the node ran, over the whole outage. A node's breaches are merged, so
no second counts twice.
"""

from __future__ import annotations

import calendar
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.errors import UserInputError
from gpulease.state.models import LedgerEntry, ProviderOutage, StatusChange

GONE_REASON = "the provider no longer lists its instance"
TIMED_OUT = "timed out"
AUTOSTOP = "autostop:"
_REQUESTERS = frozenset({"user", "budget"})  # the actors of a stop, down or cancel we asked for
_CHUNK = 500
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_SERVING = frozenset({"ready", "lost"})
_DOWN = frozenset({"terminating", "failed"})
_UNREACHABLE = "the agent did not answer while the provider billed the node"


_Span = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Clause:
    """One provider's promise: ``promise`` % availability a month, ``api_window_s`` after which
    an API outage counts, ``per_outage_hour`` × the node's hourly fee credited per outage hour."""

    promise: float | None = None
    api_window_s: float = 300.0
    per_outage_hour: float = 0.0


def parse_month(month: str | None, now: float) -> tuple[str, float, float]:
    """``YYYY-MM`` (default: the month ``now`` is in) as (label, start, end) in UTC seconds."""
    if month is None:
        d = datetime.fromtimestamp(now, UTC)
        year, mon = d.year, d.month
    else:
        m = _MONTH.match(month.strip())
        if not m or not 1 <= int(m.group(2)) <= 12 or not 1970 <= int(m.group(1)) <= 9998:
            raise UserInputError(
                f"--month: a month such as 2026-11 (1970-01 to 9998-12), not {month!r}"
            )
        year, mon = int(m.group(1)), int(m.group(2))
    start = datetime(year, mon, 1, tzinfo=UTC).timestamp()
    days = calendar.monthrange(year, mon)[1]
    return f"{year:04d}-{mon:02d}", start, start + days * 86400.0


def _number(value: Any, where: str, *, low: float = 0.0, high: float | None = None) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        raise UserInputError(f"config {where}: a number {bound}, not {value!r}")
    return float(value)


def clauses(config: Mapping[str, Any]) -> dict[str, Clause]:
    """The ``sla:`` section: ``{provider: {promise, api_window_minutes, credit:
    {per_outage_hour}}}``; a bad entry is a :class:`UserInputError` naming it."""
    section = config.get("sla") or {}
    if not isinstance(section, Mapping):
        raise UserInputError("config sla: a mapping of provider names to their SLA")
    found: dict[str, Clause] = {}
    for name, entry in section.items():
        where = f"sla.{name}"
        if not isinstance(entry, Mapping):
            raise UserInputError(f"config {where}: a mapping (promise, api_window_minutes, credit)")
        unknown = set(entry) - {"promise", "api_window_minutes", "credit"}
        if unknown:
            raise UserInputError(f"config {where}: unknown keys {sorted(unknown)}")
        credit = entry.get("credit") or {}
        if not isinstance(credit, Mapping) or set(credit) - {"per_outage_hour"}:
            raise UserInputError(f"config {where}.credit: a mapping with per_outage_hour")
        promise = entry.get("promise")
        window = entry.get("api_window_minutes", 5)
        multiple = credit.get("per_outage_hour", 0)
        found[str(name)] = Clause(
            promise=None if promise is None else _number(promise, f"{where}.promise", high=100),
            api_window_s=60 * _number(window, f"{where}.api_window_minutes"),
            per_outage_hour=_number(multiple, f"{where}.credit.per_outage_hour"),
        )
    return found


@dataclass
class _Node:
    node_id: int
    provider: str
    region: str
    pricing: str
    cluster_id: int | None
    job_id: int | None
    cluster_name: str | None
    rows: list[tuple[float, float, float]] = field(default_factory=list)  # start, end, $/h

    def price_at(self, t: float) -> float:
        before = [r for r in self.rows if r[0] <= t] or self.rows
        return max(before, key=lambda r: r[0])[2]


@dataclass(frozen=True, slots=True)
class Breach:
    kind: str  # node_lost | agent_unreachable | api_outage
    node: _Node
    start: float
    end: float
    reason: str


def _nodes(session: Session, start: float, end: float) -> dict[int, _Node]:
    rows = session.scalars(
        select(LedgerEntry).where(
            LedgerEntry.kind == "instance",
            LedgerEntry.node_id.is_not(None),
            LedgerEntry.started_at < end,
            LedgerEntry.ended_at > start,
        )
    )
    nodes: dict[int, _Node] = {}
    for r in rows:
        assert r.node_id is not None
        node = nodes.get(r.node_id)
        if node is None:
            node = nodes[r.node_id] = _Node(r.node_id, r.provider, r.region or "-", r.pricing,
                                            r.cluster_id, r.job_id, r.cluster_name)  # fmt: skip
        node.rows.append((r.started_at, r.ended_at, r.price_per_hour))
    return nodes


def _history(session: Session, kind: str, ids: Iterable[int], end: float) -> list[StatusChange]:
    """The entities' status changes before ``end``, oldest first (ids asked in chunks, so the
    statement stays under the databases' bound-parameter limits)."""
    wanted = sorted(set(ids))
    found: list[StatusChange] = []
    for i in range(0, len(wanted), _CHUNK):
        query = select(StatusChange).where(
            StatusChange.entity_kind == kind,
            StatusChange.entity_id.in_(wanted[i : i + _CHUNK]),
            StatusChange.at < end,
        )
        found += session.scalars(query)
    return sorted(found, key=lambda c: (c.at, c.id))


def _restores(
    session: Session, nodes: Mapping[int, _Node], node_changes: Iterable[StatusChange], end: float
) -> dict[str, list[float]]:
    """When each cluster (``c<id>``) or job (``j<id>``) had capacity back or no longer wanted it:
    a node of it became ready; a user, a budget or autostop stopped or took down the cluster; a
    user cancelled the job."""
    found: dict[str, list[float]] = defaultdict(list)
    for change in node_changes:
        node = nodes[change.entity_id]
        if change.to_status == "ready" and change.from_status != "lost":
            for key in _keys(node):
                found[key].append(change.at)
    clusters = {n.cluster_id for n in nodes.values() if n.cluster_id is not None}
    for change in _history(session, "cluster", clusters, end):
        asked = change.actor in _REQUESTERS or change.reason.startswith(AUTOSTOP)
        if asked and change.to_status in ("stopping", "terminating"):
            found[f"c{change.entity_id}"].append(change.at)
    jobs = {n.job_id for n in nodes.values() if n.job_id is not None}
    for change in _history(session, "job", jobs, end):
        if change.actor in _REQUESTERS and change.to_status in ("cancelling", "cancelled"):
            found[f"j{change.entity_id}"].append(change.at)
    return found


def _keys(node: _Node) -> list[str]:
    keys = [] if node.cluster_id is None else [f"c{node.cluster_id}"]
    return keys + ([] if node.job_id is None else [f"j{node.job_id}"])


def _node_breaches(
    node: _Node, changes: list[StatusChange], restores: Mapping[str, list[float]], end: float
) -> list[Breach]:
    breaches: list[Breach] = []
    lost_at: float | None = None
    for c in changes:
        if c.to_status == "lost" and c.from_status != "lost":
            lost_at = c.at
            continue
        if c.to_status == "preempted":
            lost_at = None  # it was the provider taking spot capacity back: no breach
            continue
        died = (
            c.from_status in _SERVING
            and c.to_status in _DOWN
            and (
                c.reason.startswith(GONE_REASON)
                or (c.from_status == "lost" and c.reason.startswith(TIMED_OUT))
            )
        )
        if died and node.pricing != "spot":
            since = c.at if lost_at is None else lost_at
            after = [t for k in _keys(node) for t in restores.get(k, ()) if t > c.at]
            until = min([*after, end])
            breaches.append(Breach("node_lost", node, since, until, c.reason))
            lost_at = None
        elif lost_at is not None:
            if not died:  # back (lost → ready) or taken down at our request
                breaches.append(Breach("agent_unreachable", node, lost_at, c.at, _UNREACHABLE))
            lost_at = None
    if lost_at is not None:
        breaches.append(Breach("agent_unreachable", node, lost_at, end, _UNREACHABLE))
    return breaches


def _api_breaches(
    session: Session, nodes: Mapping[int, _Node], rules: Mapping[str, Clause], span: _Span
) -> list[Breach]:
    start, end = span
    query = select(ProviderOutage).where(ProviderOutage.started_at < end)
    breaches: list[Breach] = []
    for o in session.scalars(query):
        stop = o.ended_at if o.ended_at is not None else o.last_seen_at
        window = rules.get(o.provider, Clause()).api_window_s
        if stop <= start or stop - o.started_at <= window:
            continue
        why = f"{o.provider} API unavailable {(stop - o.started_at) / 60:.0f} min: {o.last_error}"
        for node in nodes.values():
            if node.provider != o.provider or (o.region and node.region != o.region):
                continue
            billed = _merged((r[0], r[1]) for r in node.rows)
            for r0, r1 in billed:  # the outage counts only where the node was billed
                a, b = max(r0, o.started_at), min(r1, stop)
                if b > a:
                    breaches.append(Breach("api_outage", node, a, b, why))
    return breaches


def _merged(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(a: float, b: float, start: float, end: float) -> float:
    return max(0.0, min(b, end) - max(a, start))


def report(
    session: Session, config: Mapping[str, Any], *, month: str | None, now: float
) -> dict[str, Any]:
    """The month's SLA report: ``{month, start, end, providers: [...], breaches: [...],
    credit_usd}`` (availability in %, outage in hours, credits in dollars, unrounded)."""
    label, start, end = parse_month(month, now)
    end_seen = min(end, now)
    rules = clauses(config)
    nodes = _nodes(session, start, end)
    node_changes = _history(session, "node", nodes, end_seen)
    restores = _restores(session, nodes, node_changes, end_seen)
    by_node: dict[int, list[StatusChange]] = defaultdict(list)
    for change in node_changes:
        by_node[change.entity_id].append(change)
    breaches = [
        b for n in nodes.values() for b in _node_breaches(n, by_node[n.node_id], restores, end_seen)
    ]
    breaches += _api_breaches(session, nodes, rules, (start, end_seen))
    return _summary(label, (start, end), nodes, breaches, rules)


def _summary(
    label: str,
    span: _Span,
    nodes: Mapping[int, _Node],
    breaches: list[Breach],
    rules: Mapping[str, Clause],
) -> dict[str, Any]:
    start, end = span
    spans: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for b in breaches:
        spans[b.node.node_id].append((max(b.start, start), min(b.end, end)))
    groups: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for node in nodes.values():
        g = groups[(node.provider, node.region)]
        billed = _merged((r[0], r[1]) for r in node.rows)
        g["billed_s"] += sum(_overlap(r0, r1, start, end) for r0, r1 in billed)
        for t0, t1 in _merged(s for s in spans[node.node_id] if s[1] > s[0]):
            inside = sum(_overlap(t0, t1, r0, r1) for r0, r1 in billed)
            g["outage_s"] += t1 - t0
            g["unbilled_s"] += (t1 - t0) - inside
            g["fee_usd"] += node.price_at(t0) * (t1 - t0) / 3600.0
    providers = [_group(p, r, g, rules.get(p, Clause())) for (p, r), g in sorted(groups.items())]
    return {
        "month": label,
        "start": start,
        "end": end,
        "providers": providers,
        "breaches": [_breach(b) for b in sorted(breaches, key=lambda b: (b.start, b.node.node_id))],
        "credit_usd": sum(p["credit_usd"] for p in providers),
    }


def _group(provider: str, region: str, g: Mapping[str, float], clause: Clause) -> dict[str, Any]:
    expected = g["billed_s"] + g["unbilled_s"]
    availability = 100.0 if expected <= 0 else 100.0 * (expected - g["outage_s"]) / expected
    met = clause.promise is None or availability >= clause.promise
    return {
        "provider": provider,
        "region": region,
        "node_hours": expected / 3600.0,
        "outage_hours": g["outage_s"] / 3600.0,
        "availability_pct": availability,
        "promise_pct": clause.promise,
        "met": met,
        "credit_per_outage_hour": clause.per_outage_hour,
        "credit_usd": 0.0 if met else clause.per_outage_hour * g["fee_usd"],
    }


def _breach(b: Breach) -> dict[str, Any]:
    n = b.node
    return {"kind": b.kind, "provider": n.provider, "region": n.region, "node_id": n.node_id,
            "cluster": n.cluster_name, "job_id": n.job_id, "start": b.start, "end": b.end,
            "outage_hours": (b.end - b.start) / 3600.0, "reason": b.reason}  # fmt: skip
