"""Running the audit: loading its rows for a period (:func:`load_inputs`), the families of
findings, ranking by dollars (:func:`run_audit`) and the JSON view (:func:`audit_view`).

Read only: one session, SELECTs only. Moves no states.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpulease.catalog import Catalog
from gpulease.cost.audit import pricing, usage
from gpulease.cost.audit.model import (
    AuditInputs,
    Finding,
    Period,
    Rightsizer,
    Thresholds,
    overlap_cost,
)
from gpulease.cost.audit.telemetry import PointRow, digest_points
from gpulease.state.models import Cluster, Job, LedgerEntry, Node, StatusChange, TelemetryPoint

FAMILIES: tuple[Callable[[AuditInputs], list[Finding]], ...] = (
    usage.idle_gpus,
    usage.left_up,
    usage.train_efficiency,
    usage.oversized_gpus,
    pricing.spot_slack,
    pricing.cheaper_region,
    pricing.commitment,
    pricing.stale_catalog,
)


_BATCH = 5000


def _window(period: Period) -> tuple[Any, ...]:
    # a bucket starts at most an hour (the coarsest resolution met) before the period
    return (TelemetryPoint.at < period.end, TelemetryPoint.at > period.start - 3600)


def _resolutions(session: Session, period: Period) -> dict[tuple[int, int], int]:
    """Per (cluster, node rank) with points in the period: the coarsest stored resolution."""
    stmt = (
        select(
            TelemetryPoint.cluster_id,
            TelemetryPoint.node_rank,
            func.max(TelemetryPoint.resolution_s),
        )
        .where(*_window(period))
        .group_by(TelemetryPoint.cluster_id, TelemetryPoint.node_rank)
    )
    return {(c, r): int(res) for c, r, res in session.execute(stmt)}


def _points(
    session: Session, period: Period, chosen: Mapping[tuple[int, int], int]
) -> Iterator[PointRow]:
    """The period's points at each node's chosen resolution, streamed in batches."""
    stmt = (
        select(
            TelemetryPoint.cluster_id,
            TelemetryPoint.job_id,
            TelemetryPoint.node_rank,
            TelemetryPoint.resolution_s,
            TelemetryPoint.at,
            TelemetryPoint.data,
        )
        .where(*_window(period))
        .execution_options(yield_per=_BATCH)
    )
    for cid, job_id, rank, res, at, data in session.execute(stmt):
        if chosen.get((cid, rank)) == res and isinstance(data, Mapping):
            yield cid, job_id, rank, res, at, data


def _ledger(session: Session, period: Period) -> list[LedgerEntry]:
    stmt = (
        select(LedgerEntry)
        .where(
            LedgerEntry.kind == "instance",
            LedgerEntry.started_at < period.end,
            LedgerEntry.ended_at > period.start,
        )
        .order_by(LedgerEntry.id)
    )
    return list(session.scalars(stmt))


def load_inputs(
    session: Session,
    period: Period,
    *,
    catalog: Catalog | None,
    config: Mapping[str, Any] | None = None,
    rightsizer: Rightsizer | None = None,
    thresholds: Thresholds | None = None,
    public: Catalog | None = None,
) -> AuditInputs:
    """The instance ledger rows overlapping ``period``, what they and the period's telemetry
    name, and the telemetry folded (streamed: no point is kept)."""
    ledger = _ledger(session, period)
    chosen = _resolutions(session, period)
    cluster_ids = {r.cluster_id for r in ledger if r.cluster_id is not None}
    cluster_ids |= {cid for cid, _ in chosen}
    job_ids = {r.job_id for r in ledger if r.job_id is not None}
    clusters = {
        c.id: c for c in session.scalars(select(Cluster).where(Cluster.id.in_(cluster_ids)))
    }
    nodes = {n.id: n for n in session.scalars(select(Node).where(Node.cluster_id.in_(cluster_ids)))}
    jobs = {j.id: j for j in session.scalars(select(Job).where(Job.id.in_(job_ids)))}
    changes = list(
        session.scalars(
            select(StatusChange).where(
                StatusChange.entity_kind == "cluster", StatusChange.entity_id.in_(cluster_ids)
            )
        )
    )
    limits = thresholds or Thresholds()
    telemetry = digest_points(
        _points(session, period, chosen),
        period=period,
        ledger=ledger,
        nodes=nodes,
        idle_below_pct=limits.idle_utilisation_pct,
    )
    return AuditInputs(
        period=period,
        ledger=ledger,
        clusters=clusters,
        nodes=nodes,
        jobs=jobs,
        telemetry=telemetry,
        changes=changes,
        catalog=catalog,
        config=dict(config or {}),
        rightsizer=rightsizer,
        thresholds=limits,
        public=public,
    )


def run_audit(inputs: AuditInputs) -> list[Finding]:
    """Every family's findings, the costliest first (ties: by kind, then title)."""
    found = [finding for family in FAMILIES for finding in family(inputs)]
    return sorted(found, key=lambda f: (-f.dollars, f.kind, f.title))


def audit_view(inputs: AuditInputs, findings: list[Finding]) -> dict[str, Any]:
    """The JSON answer of ``GET /v1/audit`` and ``gpulease audit --json``."""
    spend = sum(overlap_cost(r, inputs.period) for r in inputs.ledger)
    return {
        "since": inputs.period.start,
        "until": inputs.period.end,
        "spend_usd": spend,
        "findings": [f.to_dict() for f in findings],
        "total_usd": sum(f.dollars for f in findings),
        "notes": list(dict.fromkeys(inputs.notes)),
    }
