"""Estimated against actual: for the runs with ledger rows in a period that had a plan estimate,
what the plan said against what the ledger holds for the whole run (all its rows, not only the
period's share).

Where the estimate is kept:

- a managed job: its document (``jobs.task``) has ``policy.job_s`` (the optimizer's expected run
  time, from the task's workload) and the ranked ``spot`` / ``on_demand`` targets with their
  quoted whole-attempt ``price_per_hour``; the estimate is ``job_s`` × the first target's price
  (spot first when ``policy.use_spot`` is not ``false`` and a spot target exists). A job with
  no ``job_s`` had no estimate and is left out.
- a plain cluster (no job): its launch document's plans carry a quoted $/h but no run time, so
  the estimate is the quote (``clusters.price_per_hour``, the plan it launched on) × the hours
  its instance rows span in the ledger; the difference is what the quote did not know (spot
  price changes, billing minimums, volumes and storage).

The actual sums are SQL aggregates per run; only the few runs (at most :data:`LIMIT`, the most
expensive) are shaped in Python. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, case, func, select

from gpulease.cost.overlap import LEDGER, Window
from gpulease.state.models import Cluster, Job

LIMIT = 20
_JOB_BASIS = "policy.job_s x first target $/h"
_CLUSTER_BASIS = "quoted $/h x hours up"


def estimated_against_actual(conn: Connection, window: Window) -> list[dict[str, Any]]:
    """The runs of the period with an estimate, the largest actual cost first."""
    found = [*_jobs(conn, window), *_clusters(conn, window)]
    found.sort(key=lambda r: (-r["actual_usd"], r["kind"], str(r["id"])))
    return found[:LIMIT]


def _actuals(conn: Connection, window: Window, column: str) -> dict[int, Any]:
    """Per run (``job_id``, or ``cluster_id`` of a cluster outside any job) whose rows reach
    into the period: its whole cost, first start and last end, the largest first. Reads the
    ``ix_ledger_entries_job_cost`` / ``_cluster_cost`` indexes only, in their order."""
    c = LEDGER.c
    key = c[column]
    first, last = func.min(c.started_at), func.max(c.ended_at)
    if column == "cluster_id":  # the hours it was up: its instance rows
        inst = c.kind == "instance"
        first, last = func.min(case((inst, c.started_at))), func.max(case((inst, c.ended_at)))
    query = (
        select(key.label("run"), func.sum(c.cost_usd).label("actual"),
               first.label("first"), last.label("last"))
        .where(key.is_not(None))
        .group_by(key)
        .having(func.max(c.ended_at) >= window.start, func.min(c.started_at) < window.end)
        .order_by(func.sum(c.cost_usd).desc())
        .limit(LIMIT * 5)
    )  # fmt: skip
    if column == "cluster_id":  # outside any job; in HAVING, so the cluster index serves it
        query = query.having(func.count(c.job_id) == 0)
    return {int(row.run): row for row in conn.execute(query)}


def _jobs(conn: Connection, window: Window) -> list[dict[str, Any]]:
    actual = _actuals(conn, window, "job_id")
    if not actual:
        return []
    rows = conn.execute(select(Job.id, Job.name, Job.task).where(Job.id.in_(list(actual))))
    found = []
    for job_id, name, doc in rows:
        estimate = job_estimate(doc or {})
        if estimate is None:
            continue
        spent = float(actual[job_id].actual)
        found.append(
            _row("job", job_id, name=name, estimate=estimate, spent=spent, basis=_JOB_BASIS)
        )
    return found


def _clusters(conn: Connection, window: Window) -> list[dict[str, Any]]:
    actual = _actuals(conn, window, "cluster_id")
    if not actual:
        return []
    query = select(Cluster.id, Cluster.name, Cluster.price_per_hour).where(
        Cluster.id.in_(list(actual)), Cluster.job_id.is_(None)
    )
    found = []
    for cluster_id, name, quote in conn.execute(query):
        run = actual[cluster_id]
        if quote is None or run.first is None or run.last is None:
            continue
        estimate = float(quote) * max(0.0, float(run.last) - float(run.first)) / 3600.0
        spent = float(run.actual)
        found.append(
            _row(
                "cluster",
                cluster_id,
                name=name,
                estimate=estimate,
                spent=spent,
                basis=_CLUSTER_BASIS,
            )
        )
    return found


def job_estimate(doc: Mapping[str, Any]) -> float | None:
    """A job document's plan estimate in dollars (see the module docstring), or None."""
    policy = doc.get("policy") or {}
    job_s = policy.get("job_s")
    if not isinstance(job_s, int | float) or job_s <= 0:
        return None
    spot, on_demand = doc.get("spot") or [], doc.get("on_demand") or []
    use_spot = str(policy.get("use_spot", "false")) != "false"
    targets = [*spot, *on_demand] if use_spot else [*on_demand, *spot]
    for target in targets:
        price = target.get("price_per_hour") if isinstance(target, Mapping) else None
        if isinstance(price, int | float):
            return float(job_s) * float(price) / 3600.0
    return None


def _row(
    kind: str, run: int, *, name: str, estimate: float, spent: float, basis: str
) -> dict[str, Any]:
    return {
        "kind": kind,
        "id": run,
        "name": name,
        "estimated_usd": estimate,
        "actual_usd": spent,
        "difference_usd": spent - estimate,
        "difference_pct": round(100.0 * (spent - estimate) / estimate, 2) if estimate else None,
        "basis": basis,
    }
