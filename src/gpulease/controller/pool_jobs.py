"""Managed jobs on pool nodes (``resources.pool``): the queue a pool is sized by, a job taking an
idle node, and giving the node back when the job is done with it — the DB side the jobs loop
(:mod:`~gpulease.controller.job_loop`) calls instead of creating an attempt cluster.

A job *takes* an idle node (a pool's cluster resting SUCCEEDED with no ``job_id``, every node
READY) in the jobs loop's transaction: SUCCEEDED → SETTING_UP compare-and-set (so a removal by the
pools loop, SUCCEEDED → TERMINATING, and two jobs never both win), ``job_id`` = the job, and the
node's launch document made the job's (its run, task id and checkpoint; the node's plans kept).
The cluster loop then runs it like any task: the agent takes a task with a new task id on the
same node — the pool's setup ran once, when the node came up. When the job is done with a healthy
node — its task succeeded, failed or was cancelled — the node is *released*
(:mod:`~gpulease.controller.pool_return` checks it first): ``job_id`` back to NULL, the cluster
SUCCEEDED — idle again, for the next job. A node that was preempted, lost or failed is torn down
as any attempt cluster is (the pool replaces it when the queue needs it). A take and a give-back
split the node's open ledger rows (:func:`rebill`), so a job's spend is the node's time while it
held it. States moved: node clusters SUCCEEDED → SETTING_UP and FAILED → SUCCEEDED; ledger rows
split (one closed, the next opened).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.controller.document import LaunchDocument
from gpulease.controller.job_document import JobDocument
from gpulease.state import (
    Cluster,
    ClusterStatus,
    Job,
    JobStatus,
    NodeState,
    Pool,
    PoolStatus,
    list_nodes,
    set_status,
)
from gpulease.state.ledger import close, open_entry, replace_facts
from gpulease.state.models import LedgerEntry

_C = ClusterStatus
WAITING = frozenset({JobStatus.PENDING, JobStatus.RECOVERING})
_GONE = frozenset({PoolStatus.SHUTTING_DOWN, PoolStatus.DOWN})


@dataclass(frozen=True, slots=True)
class Taken:
    """What a take found: the node now the job's (``cluster``), none idle (both None), or the
    pool gone (``gone``: why the job cannot run)."""

    cluster: Cluster | None = None
    gone: str | None = None


def waiting_jobs(session: Session, pool_name: str) -> list[int]:
    """The managed jobs queued for ``pool_name``: waiting to start or to recover, oldest
    first."""
    stmt = select(Job).where(Job.status.in_(list(WAITING))).order_by(Job.id)
    return [j.id for j in session.scalars(stmt) if (j.task or {}).get("pool") == pool_name]


def _idle_nodes(session: Session, pool_id: int) -> list[Cluster]:
    """The pool's idle nodes, most recently idle first (the sizing removes the oldest idle)."""
    stmt = (
        select(Cluster)
        .where(Cluster.pool_id == pool_id, Cluster.status == _C.SUCCEEDED)
        .where(Cluster.job_id.is_(None))
        .order_by(Cluster.status_changed_at.desc(), Cluster.id.desc())
    )
    found: list[Cluster] = []
    for cluster in session.scalars(stmt):
        states = [n.state for n in list_nodes(session, cluster.id)]
        live = [s for s in states if s is not NodeState.TERMINATED]
        if len(live) == cluster.num_nodes and all(s is NodeState.READY for s in live):
            found.append(cluster)
    return found


def rebill(session: Session, cluster_id: int, job_id: int | None, at: float) -> int:
    """Split the node's open ``instance`` ledger rows at ``at`` (the ledger's clock: the job's)
    so that the time after it is billed to ``job_id`` (None: to the pool alone) — a row takes
    its job from the cluster when it opens, and a pool node's row opens when the node comes up.
    The rows stay contiguous (a row already advanced past ``at`` is split at its end); the
    number of rows split."""
    stmt = select(LedgerEntry).where(
        LedgerEntry.cluster_id == cluster_id,
        LedgerEntry.closed.is_(False),
        LedgerEntry.kind == "instance",
    )
    split = 0
    for row in list(session.scalars(stmt)):
        if row.job_id == job_id:
            continue
        when = max(at, row.ended_at)
        if when <= row.started_at:  # nothing billed in it yet: the row is the new owner's
            row.job_id = job_id
            continue
        close(row, when, now=when)
        facts = replace_facts(row, job_id=job_id)
        open_entry(session, facts, started_at=when, now=when, run_started_at=row.run_started_at)
        split += 1
    return split


def take_node(
    session: Session,
    job_id: int,
    doc: JobDocument,
    *,
    now: float,
    actor: str,
    job_name: str,
    billed_at: float | None = None,
) -> Taken:
    """Make an idle node of the job's pool the job's (see the module docstring)."""
    assert doc.pool is not None
    pool = session.scalars(select(Pool).where(Pool.name == doc.pool)).first()
    if pool is None or pool.status in _GONE:
        state = "does not exist" if pool is None else f"is {pool.status.value}"
        return Taken(gone=f"pool {doc.pool} {state}")
    for cluster in _idle_nodes(session, pool.id):
        reason = f"runs managed job {job_name} ({job_id})"
        if not set_status(session, cluster, _C.SETTING_UP, expected=_C.SUCCEEDED, actor=actor,
                          reason=reason, now=now):  # fmt: skip
            continue  # removed or taken meanwhile: the next one
        node_doc = LaunchDocument.from_json(cluster.task)
        cluster.task = LaunchDocument(
            run=doc.run, plans=node_doc.plans, spec=doc.spec, task_id=doc.task_id,
            checkpoint=doc.checkpoint,
        ).to_json()  # fmt: skip
        cluster.job_id = job_id
        cluster.failure = cluster.task_failure = None
        cluster.last_activity_at = now
        rebill(session, cluster.id, job_id, now if billed_at is None else billed_at)
        return Taken(cluster=cluster)
    return Taken()


def release_node(
    session: Session,
    cluster: Cluster,
    job_id: int,
    *,
    billed_at: float,
    now: float,
    actor: str,
    reason: str,
) -> bool:
    """Give a pool node back to its pool, idle (its time from ``billed_at`` on billed to the pool
    alone): one that SUCCEEDED stays so, one that FAILED (its checks done by
    :mod:`~gpulease.controller.pool_return`) moves back to SUCCEEDED, compare-and-set; False when
    the cluster is no pool node of this job, or neither."""
    if cluster.pool_id is None or cluster.job_id != job_id:
        return False
    if cluster.status is _C.FAILED:
        if not set_status(session, cluster, _C.SUCCEEDED, expected=_C.FAILED, actor=actor,
                          reason=reason, now=now):  # fmt: skip
            return False
        cluster.failure = cluster.task_failure = None
    elif cluster.status is not _C.SUCCEEDED:
        return False
    cluster.job_id = None
    rebill(session, cluster.id, None, billed_at)
    return True
