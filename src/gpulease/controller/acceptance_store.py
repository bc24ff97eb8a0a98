"""The state DB side of acceptance on launch (:mod:`.acceptance`): the launch intent of a
replacement node, the acceptance state kept in a cluster's launch document, and the offers that
delivered a failing node lately (:func:`degraded_offers`, which the server's launch ranking puts
last), and the acceptance rounds' judged reports as ``bench_runs`` rows (:func:`keep_runs`, next
to ``gpulease bench CLUSTER``'s). Moves no states itself (the applier moves them under its
claim).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from gpulease.state import Claim, ClusterStatus, current_target, new_request_id
from gpulease.state.bench import BenchRun
from gpulease.state.claims import claim_guard
from gpulease.state.machines import IntentStatus
from gpulease.state.models import Cluster, LaunchIntent
from gpulease.state.status import record_created

Offer = tuple[str, str | None, str | None]  # provider, region, instance type
LOOK_BACK_S = 7 * 86400.0  # clusters touched within this long are read for degraded offers


def add_replacement_intent(
    session: Session, cluster: Cluster, num_nodes: int, *, actor: str, now: float
) -> LaunchIntent:
    """A PENDING launch intent for ``num_nodes`` new nodes of the cluster's current target."""
    target = current_target(cluster)
    intent = LaunchIntent(
        request_id=new_request_id(), cluster=cluster, provider=target.provider,
        region=target.region, zone=target.zone, instance_type=target.instance_type,
        pricing=target.pricing, num_nodes=num_nodes, status=IntentStatus.PENDING,
        status_changed_at=now, attempt=0, created_at=now, updated_at=now,
    )  # fmt: skip
    session.add(intent)
    record_created(session, intent, actor=actor, reason="acceptance: replacing failed node(s)")
    return intent


def keep_state(cluster: Cluster, state: Mapping[str, Any], now: float) -> None:
    """Write the acceptance state into the cluster's launch document (a new dict: the JSON
    column sees the change)."""
    cluster.task = {**cluster.task, "acceptance": dict(state)}
    cluster.updated_at = now


def keep_state_guarded(
    session: Session,
    cluster: Cluster,
    state: Mapping[str, Any],
    *,
    expected: ClusterStatus | None,
    claim: Claim,
    now: float,
) -> bool:
    """:func:`keep_state` as a compare-and-set: only while the cluster is still ``expected`` and
    ``claim`` is held (False, writing nothing, otherwise)."""
    stmt = (
        update(Cluster)
        .where(Cluster.id == cluster.id, Cluster.status == expected, claim_guard(Cluster, claim))
        .values(task={**cluster.task, "acceptance": dict(state)}, updated_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return cast(CursorResult[Any], session.execute(stmt)).rowcount == 1


def keep_runs(session: Session, cluster: Cluster, runs: Iterable[Mapping[str, Any]]) -> int:
    """One ``bench_runs`` row per judged report of an acceptance round (where ``gpulease bench
    CLUSTER`` keeps its runs: the history later runs are judged by and ``plan --observed``
    reads); a report already kept (same instance, same start) is not added again. Returns the
    rows added."""
    added = 0
    for run in runs:
        report = dict(run["report"])
        instance_id, started = str(run["instance_id"]), float(report.get("started_at", 0.0))
        exists = select(BenchRun.id).where(BenchRun.instance_id == instance_id,
                                           BenchRun.started_at == started)  # fmt: skip
        if session.scalars(exists).first() is not None:
            continue
        session.add(BenchRun(
            cluster=cluster.name, node_rank=int(run["rank"]), instance_id=instance_id,
            provider=cluster.provider, region=cluster.region,
            instance_type=cluster.instance_type, accelerator=cluster.accelerator,
            started_at=started, quick=bool(report.get("quick", True)),
            verdict=str(report.get("verdict", "info")), report=report,
        ))  # fmt: skip
        added += 1
    return added


def degraded_offers(session: Session, now: float) -> dict[Offer, str]:
    """Offers (provider, region, instance type) that delivered a node failing acceptance whose
    ``degraded_for`` has not run out at ``now`` → the newest such failure, in words."""
    stmt = select(Cluster.task).where(Cluster.updated_at >= now - LOOK_BACK_S)
    found: dict[Offer, tuple[float, str]] = {}
    for task in session.scalars(stmt):
        acceptance = task.get("acceptance") if isinstance(task, dict) else None
        for failure in (acceptance or {}).get("failures") or ():
            if float(failure.get("until", 0.0)) <= now:
                continue
            offer = (str(failure.get("provider")), failure.get("region"),
                     failure.get("instance_type"))  # fmt: skip
            at = float(failure.get("at", 0.0))
            if offer not in found or found[offer][0] < at:
                found[offer] = (at, str(failure.get("why", "")))
    return {offer: why for offer, (_at, why) in found.items()}
