"""Running the audit: loading its rows for a period (:func:`load_inputs`), the families of
findings, ranking by dollars (:func:`run_audit`) and the JSON view (:func:`audit_view`).

Read only: one session, SELECTs only. Moves no states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.catalog import Catalog
from gpulease.cost.audit import pricing, usage
from gpulease.cost.audit.model import AuditInputs, Finding, Period, Rightsizer, Thresholds
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


def _coarsest(points: list[TelemetryPoint]) -> list[TelemetryPoint]:
    """One resolution per node (the coarsest stored), so no second is counted twice."""
    best: dict[tuple[int, int], int] = {}
    for p in points:
        key = (p.cluster_id, p.node_rank)
        best[key] = max(best.get(key, 0), p.resolution_s)
    return [p for p in points if p.resolution_s == best[(p.cluster_id, p.node_rank)]]


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
    """The instance ledger rows overlapping ``period`` and what they and the period's
    telemetry name."""
    ledger = list(
        session.scalars(
            select(LedgerEntry)
            .where(
                LedgerEntry.kind == "instance",
                LedgerEntry.started_at < period.end,
                LedgerEntry.ended_at > period.start,
            )
            .order_by(LedgerEntry.id)
        )
    )
    points = _coarsest(
        list(
            session.scalars(
                select(TelemetryPoint)
                .where(TelemetryPoint.at < period.end, TelemetryPoint.at > period.start - 3600)
                .order_by(TelemetryPoint.id)
            )
        )
    )
    cluster_ids = {r.cluster_id for r in ledger if r.cluster_id is not None}
    cluster_ids |= {p.cluster_id for p in points}
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
    return AuditInputs(
        period=period,
        ledger=ledger,
        clusters=clusters,
        nodes=nodes,
        jobs=jobs,
        points=points,
        changes=changes,
        catalog=catalog,
        config=dict(config or {}),
        rightsizer=rightsizer,
        thresholds=thresholds or Thresholds(),
        public=public,
    )


def run_audit(inputs: AuditInputs) -> list[Finding]:
    """Every family's findings, the costliest first (ties: by kind, then title)."""
    found = [finding for family in FAMILIES for finding in family(inputs)]
    return sorted(found, key=lambda f: (-f.dollars, f.kind, f.title))


def audit_view(inputs: AuditInputs, findings: list[Finding]) -> dict[str, Any]:
    """The JSON answer of ``GET /v1/audit`` and ``gpulease audit --json``."""
    spend = sum(
        r.cost_usd
        * inputs.period.overlap_s(r.started_at, r.ended_at)
        / max(r.ended_at - r.started_at, 1e-9)
        for r in inputs.ledger
    )
    return {
        "since": inputs.period.start,
        "until": inputs.period.end,
        "spend_usd": spend,
        "findings": [f.to_dict() for f in findings],
        "total_usd": sum(f.dollars for f in findings),
        "notes": list(dict.fromkeys(inputs.notes)),
    }
