"""Reconcile claims: a lock token and expiry on a cluster row, so that two reconcile workers never
process the same cluster at once (the dstack pipeline pattern).

Owns :class:`Claim`, :func:`claim`, :func:`claim_next`, :func:`renew`, :func:`release` and
:func:`claim_guard` (the ``WHERE`` clause that makes a write count only while the claim is held).
It moves no statuses; it writes only ``clusters.lock_*`` and ``clusters.last_processed_at``.

A worker claims in a short transaction of its own and commits, does the slow work (provider calls)
outside any transaction, then writes back guarded by the claim (``set_status(…, claim=c)``) and
releases. A claim that outlives ``until`` (the worker died) can be taken by another worker; the
dead worker's late writes then fail their guard.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, CursorResult, and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from gpulease.state.machines import ClusterStatus
from gpulease.state.models import Cluster, LaunchIntent, Node


@dataclass(frozen=True, slots=True)
class Claim:
    """Proof that ``worker`` holds ``cluster_id`` until ``until`` (clock seconds)."""

    cluster_id: int
    worker: str
    token: str
    until: float


def _free(now: float) -> ColumnElement[bool]:
    return or_(Cluster.lock_token.is_(None), Cluster.lock_expires_at <= now)


def _rowcount(session: Session, stmt: Any) -> int:
    return cast(CursorResult[Any], session.execute(stmt)).rowcount


def claim(
    session: Session, cluster_id: int, worker: str, *, until: float, now: float
) -> Claim | None:
    """Claim the cluster for ``worker`` until ``until`` when nobody holds a live claim on it;
    None when someone does. Commit before doing the work the claim protects."""
    if until <= now:
        raise ValueError("a claim must end after now")
    token = secrets.token_hex(16)
    stmt = (
        update(Cluster)
        .where(Cluster.id == cluster_id, _free(now))
        .values(lock_worker=worker, lock_token=token, lock_expires_at=until)
        .execution_options(synchronize_session="fetch")
    )
    if _rowcount(session, stmt) != 1:
        return None
    return Claim(cluster_id=cluster_id, worker=worker, token=token, until=until)


def claim_next(
    session: Session,
    worker: str,
    *,
    until: float,
    now: float,
    statuses: frozenset[ClusterStatus] | None = None,
    candidates: int = 16,
) -> Claim | None:
    """Claim the unclaimed cluster (of ``statuses``; default every one but TERMINATED) that was
    processed longest ago; None when there is none to take."""
    wanted = statuses or frozenset(ClusterStatus) - {ClusterStatus.TERMINATED}
    stmt = (
        select(Cluster.id)
        .where(_free(now), Cluster.status.in_(list(wanted)))
        .order_by(func.coalesce(Cluster.last_processed_at, 0.0), Cluster.id)
        .limit(candidates)
    )
    for cluster_id in list(session.scalars(stmt)):
        got = claim(session, cluster_id, worker, until=until, now=now)
        if got is not None:
            return got
    return None


def renew(session: Session, held: Claim, *, until: float) -> Claim | None:
    """Extend a claim still held (its token unchanged); None when it was lost to another worker."""
    stmt = (
        update(Cluster)
        .where(Cluster.id == held.cluster_id, Cluster.lock_token == held.token)
        .values(lock_expires_at=until)
        .execution_options(synchronize_session="fetch")
    )
    if _rowcount(session, stmt) != 1:
        return None
    return Claim(cluster_id=held.cluster_id, worker=held.worker, token=held.token, until=until)


def release(session: Session, held: Claim, *, now: float) -> bool:
    """Give the claim up and stamp ``last_processed_at``; False when it was no longer held."""
    stmt = (
        update(Cluster)
        .where(Cluster.id == held.cluster_id, Cluster.lock_token == held.token)
        .values(lock_worker=None, lock_token=None, lock_expires_at=None, last_processed_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return _rowcount(session, stmt) == 1


def claim_guard(model: type[Any], held: Claim) -> ColumnElement[bool]:
    """A ``WHERE`` clause true only for rows of the claimed cluster while the claim is held."""
    if model is Cluster:
        return and_(Cluster.id == held.cluster_id, Cluster.lock_token == held.token)
    if model is Node or model is LaunchIntent:
        held_cluster = exists().where(
            Cluster.id == held.cluster_id, Cluster.lock_token == held.token
        )
        return and_(model.cluster_id == held.cluster_id, held_cluster)
    raise TypeError(f"no claim guard for {model.__name__}")
