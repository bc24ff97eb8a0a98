"""Findings about how the rented GPUs were used: GPU-hours billed while idle, clusters left up
after their task, jobs with low MFU or input-bound, and GPUs much larger than the job needed.

The telemetry figures come folded (:mod:`.telemetry`: idle GPU-seconds priced at their ledger
rows, peak memory, mean MFU and data-wait share). Pure over :class:`AuditInputs`; moves no
states.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gpulease.cost.audit.model import (
    AuditInputs,
    Finding,
    RightsizeAsk,
    overlap_cost,
    overlap_hours,
    rounded,
    spec_of,
)
from gpulease.state.models import Cluster, LedgerEntry

ENDED = {"succeeded", "failed"}
#: a cluster billed this long after its task ended is "left up" (autostop's own minimum is 5 min)
LEFT_UP_GRACE_S = 600.0


def rows_by_cluster(inputs: AuditInputs) -> dict[int, list[LedgerEntry]]:
    out: dict[int, list[LedgerEntry]] = defaultdict(list)
    for row in inputs.ledger:
        if row.cluster_id is not None:
            out[row.cluster_id].append(row)
    return out


def _name(inputs: AuditInputs, cluster_id: int, fallback: str | None) -> str:
    cluster = inputs.clusters.get(cluster_id)
    return cluster.name if cluster is not None else (fallback or f"#{cluster_id}")


def _ledger_name(inputs: AuditInputs, cluster_id: int) -> str | None:
    return next((r.cluster_name for r in inputs.ledger if r.cluster_id == cluster_id), None)


def idle_gpus(inputs: AuditInputs) -> list[Finding]:
    """Per cluster: GPU-hours below the idle threshold while a ledger row billed the node."""
    limit = inputs.thresholds.idle_utilisation_pct
    findings = []
    for cid, tally in inputs.telemetry.idle.items():
        if tally.usd <= 0:
            continue
        name = _name(inputs, cid, _ledger_name(inputs, cid))
        findings.append(
            Finding(
                kind="idle_gpus",
                title=f"{name}: {tally.gpu_s / 3600:.1f} GPU-hours billed while idle",
                dollars=tally.usd,
                action=(
                    f"give {name} an idle rule (resources.autostop: "
                    f"{{idle_minutes: 10, gpu_utilisation_below: {limit:g}}}) or down it "
                    "when the work is done"
                ),
                evidence={
                    "cluster": name,
                    "cluster_id": cid,
                    "idle_gpu_hours": rounded(tally.gpu_s / 3600.0),
                    "below_utilisation_pct": limit,
                },
            )
        )
    return findings


def _task_ended_at(changes: Iterable[Any]) -> float | None:
    """When the cluster's task last ended (SUCCEEDED / FAILED) with nothing run since."""
    ended: float | None = None
    for change in changes:
        if change.to_status in ENDED:
            ended = change.at if ended is None else ended
        elif change.to_status in {"provisioning", "setting_up", "running", "starting"}:
            ended = None
    return ended


def left_up(inputs: AuditInputs) -> list[Finding]:
    """Clusters still billed more than :data:`LEFT_UP_GRACE_S` after their task ended."""
    per_cluster: dict[int, list[Any]] = defaultdict(list)
    for change in sorted(inputs.changes, key=lambda c: (c.at, c.id)):
        if change.entity_kind == "cluster":
            per_cluster[change.entity_id].append(change)
    findings = []
    for cid, rows in rows_by_cluster(inputs).items():
        ended = _task_ended_at(per_cluster.get(cid, ()))
        if ended is None:
            continue
        billed_until = max(min(r.ended_at, inputs.period.end) for r in rows)
        if billed_until - ended <= LEFT_UP_GRACE_S:
            continue
        usd = sum(overlap_cost(r, inputs.period, start=ended) for r in rows)
        cluster = inputs.clusters.get(cid)
        name = _name(inputs, cid, rows[0].cluster_name)
        no_autostop = cluster is not None and cluster.autostop_minutes is None
        still = any(not r.closed for r in rows)
        action = f"gpulease down {name}" if still else f"down {name} when its task ends"
        if no_autostop:
            action += "; set resources.autostop (e.g. autostop: {idle_minutes: 10, down: true})"
        findings.append(
            Finding(
                kind="left_up",
                title=f"{name}: billed {(billed_until - ended) / 3600:.1f} h after its task ended"
                + ("; no autostop" if no_autostop else ""),
                dollars=usd,
                action=action,
                evidence={
                    "cluster": name,
                    "cluster_id": cid,
                    "task_ended_at": ended,
                    "billed_until": billed_until,
                    "hours_after": rounded((billed_until - ended) / 3600.0),
                    "autostop": not no_autostop,
                    "still_billed": still,
                },
            )
        )
    return findings


def train_efficiency(inputs: AuditInputs) -> list[Finding]:
    """Input-bound jobs (dollars: their spend × the data-wait share) and, otherwise, jobs with
    low MFU (dollars: their spend × (1 − MFU / the low-MFU threshold))."""
    t = inputs.thresholds
    spends: dict[tuple[str, int], float] = defaultdict(float)
    for row in inputs.ledger:
        cost = overlap_cost(row, inputs.period)
        if row.job_id is not None:
            spends[("job", row.job_id)] += cost
        if row.cluster_id is not None:
            spends[("cluster", row.cluster_id)] += cost
    findings = []
    for (scope, ident), means in inputs.telemetry.train.items():
        spend = spends.get((scope, ident), 0.0)
        if spend <= 0:
            continue
        label = f"job {ident}" if scope == "job" else _name(inputs, ident, None)
        evidence = {
            scope: ident,
            "spend_usd": rounded(spend),
            **{k: rounded(v) for k, v in means.items()},
        }
        wait, mfu = means.get("data_wait_ratio"), means.get("mfu")
        if wait is not None and wait > t.data_wait_share:
            findings.append(
                Finding(
                    kind="input_bound",
                    title=f"{label}: waits on input {wait:.0%} of its steps",
                    dollars=spend * wait,
                    evidence=evidence,
                    action="cache the data set on the node (local NVMe), prefetch batches, "
                    "raise the data loader's workers",
                )
            )
        elif mfu is not None and mfu < t.low_mfu:
            findings.append(
                Finding(
                    kind="low_mfu",
                    title=f"{label}: MFU {mfu:.0%} (below {t.low_mfu:.0%})",
                    dollars=spend * (1.0 - mfu / t.low_mfu),
                    evidence=evidence,
                    action="profile the step: larger micro-batches, bf16, fused kernels, "
                    "activation checkpointing only where memory needs it",
                )
            )
    return findings


def oversized_gpus(inputs: AuditInputs) -> list[Finding]:
    """Clusters whose peak GPU memory stayed below a third of the part's: the optimizer's
    cheapest plan on a smaller part that holds the peak (with headroom), and the saving."""
    if inputs.rightsizer is None:
        inputs.notes.append("oversized GPUs: skipped (no optimizer to ask)")
        return []
    t, findings = inputs.thresholds, []
    rows_of = rows_by_cluster(inputs)
    for cid, (peak_mb, total_mb) in inputs.telemetry.peaks.items():
        cluster, rows = inputs.clusters.get(cid), rows_of.get(cid, [])
        if cluster is None or not rows or total_mb <= 0 or peak_mb >= total_mb * t.memory_fraction:
            continue
        hours = sum(overlap_hours(r, inputs.period) for r in rows)
        answer = inputs.rightsizer(_ask(cluster, peak_mb, total_mb, hours, t.memory_headroom))
        if answer is None:
            continue
        saving = sum(
            overlap_hours(r, inputs.period) * (r.price_per_hour - answer.node_price_per_hour)
            for r in rows
        )
        if saving <= 0:
            continue
        findings.append(
            Finding(
                kind="oversized_gpus",
                title=f"{cluster.name}: peak GPU memory {peak_mb / 1024:.1f} of "
                f"{total_mb / 1024:.0f} GB; {answer.accelerator} would do",
                dollars=saving,
                action=f"run it on {answer.accelerator} ({answer.provider} {answer.region} "
                f"{answer.instance_type}, ${answer.node_price_per_hour:.2f}/h per node)",
                evidence={
                    "cluster": cluster.name,
                    "cluster_id": cid,
                    "accelerator": cluster.accelerator,
                    "peak_memory_gb": rounded(peak_mb / 1024),
                    "part_memory_gb": rounded(total_mb / 1024),
                    "hours": rounded(hours),
                    "suggested": answer.accelerator,
                    "suggested_instance_type": answer.instance_type,
                    "suggested_node_price_per_hour": answer.node_price_per_hour,
                },
            )
        )
    return findings


def _ask(
    cluster: Cluster, peak_mb: float, total_mb: float, hours: float, headroom: float
) -> RightsizeAsk:
    return RightsizeAsk(
        spec=spec_of(cluster.task),
        gpus_per_node=cluster.gpus_per_node,
        num_nodes=cluster.num_nodes,
        pricing=cluster.pricing,
        min_memory_gb=peak_mb / 1024.0 * headroom,
        below_memory_gb=total_mb / 1024.0,
        hours=max(hours, 1.0 / 60.0),
    )
