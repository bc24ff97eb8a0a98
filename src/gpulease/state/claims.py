"""Reconcile claims: a lock token and expiry on a cluster or job row, so that two reconcile
workers never step the same entity at once (the dstack pipeline pattern), and the one
"lost the race" exception every loop uses (services and pools are claimed the same way).

Owns :class:`Claim`, :func:`claim`, :func:`claim_next`, :func:`renew`, :func:`release`,
:func:`claim_guard` (the ``WHERE`` clause that makes a write count only while the claim is held),
:func:`check_held` and :class:`LostRace`. It moves no statuses; it writes only the ``lock_*`` and
``last_processed_at`` columns of ``clusters``, ``jobs``, ``services`` and ``pools``.

A worker claims in a short transaction of its own and commits, does the slow work (provider calls)
outside any transaction, then writes back guarded by the claim (``set_status(…, claim=c)``) and
releases. A claim that outlives ``until`` (the worker died) can be taken by another worker; the
dead worker's late writes then fail their guard.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from sqlalchemy import ColumnElement, CursorResult, and_, exists, func, or_, select, update
from sqlalchemy.orm import Session

from gpulease.state.machines import ClusterStatus
from gpulease.state.models import Cluster, Job, LaunchIntent, Node, Pool, Service

Claimable: TypeAlias = type[Cluster] | type[Job] | type[Service] | type[Pool]
_KINDS: dict[str, Claimable] = {"cluster": Cluster, "job": Job, "service": Service, "pool": Pool}


class LostRace(Exception):
    """A write found its row moved by another writer (a compare-and-set that matched nothing)
    or its claim gone. The step stops quietly; the next pass decides again on fresh data."""


@dataclass(frozen=True, slots=True)
class Claim:
    """Proof that ``worker`` holds the ``kind`` row ``entity_id`` until ``until`` (clock
    seconds)."""

    entity_id: int
    worker: str
    token: str
    until: float
    kind: str = "cluster"  # cluster | job | service | pool

    @property
    def model(self) -> Claimable:
        return _KINDS[self.kind]

    @property
    def cluster_id(self) -> int:
        """The claimed cluster (a cluster claim only)."""
        if self.kind != "cluster":
            raise TypeError(f"a {self.kind} claim holds no cluster")
        return self.entity_id


def _kind_of(model: Claimable) -> str:
    for kind, known in _KINDS.items():
        if known is model:
            return kind
    raise TypeError(f"{model.__name__} rows cannot be claimed")


def _free(model: Claimable, now: float) -> ColumnElement[bool]:
    return or_(model.lock_token.is_(None), model.lock_expires_at <= now)


def _rowcount(session: Session, stmt: Any) -> int:
    return cast(CursorResult[Any], session.execute(stmt)).rowcount


def claim(
    session: Session,
    entity_id: int,
    worker: str,
    *,
    until: float,
    now: float,
    model: Claimable = Cluster,
) -> Claim | None:
    """Claim the row for ``worker`` until ``until`` when nobody holds a live claim on it; None
    when someone does. Commit before doing the work the claim protects."""
    if until <= now:
        raise ValueError("a claim must end after now")
    kind = _kind_of(model)
    token = secrets.token_hex(16)
    stmt = (
        update(model)
        .where(model.id == entity_id, _free(model, now))
        .values(lock_worker=worker, lock_token=token, lock_expires_at=until)
        .execution_options(synchronize_session="fetch")
    )
    if _rowcount(session, stmt) != 1:
        return None
    return Claim(entity_id=entity_id, worker=worker, token=token, until=until, kind=kind)


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
        .where(_free(Cluster, now), Cluster.status.in_(list(wanted)))
        .order_by(func.coalesce(Cluster.last_processed_at, 0.0), Cluster.id)
        .limit(candidates)
    )
    for cluster_id in list(session.scalars(stmt)):
        got = claim(session, cluster_id, worker, until=until, now=now)
        if got is not None:
            return got
    return None


def _held(held: Claim) -> ColumnElement[bool]:
    model = held.model
    return and_(model.id == held.entity_id, model.lock_token == held.token)


def renew(session: Session, held: Claim, *, until: float) -> Claim | None:
    """Extend a claim still held (its token unchanged); None when it was lost to another worker."""
    stmt = (
        update(held.model)
        .where(_held(held))
        .values(lock_expires_at=until)
        .execution_options(synchronize_session="fetch")
    )
    if _rowcount(session, stmt) != 1:
        return None
    return Claim(held.entity_id, held.worker, held.token, until, held.kind)


def release(session: Session, held: Claim, *, now: float) -> bool:
    """Give the claim up and stamp ``last_processed_at``; False when it was no longer held."""
    stmt = (
        update(held.model)
        .where(_held(held))
        .values(lock_worker=None, lock_token=None, lock_expires_at=None, last_processed_at=now)
        .execution_options(synchronize_session="fetch")
    )
    return _rowcount(session, stmt) == 1


def check_held(session: Session, held: Claim) -> None:
    """Raise :class:`LostRace` unless the claim is still held (call at the start of a
    transaction whose writes the claim protects but no guarded ``UPDATE`` checks)."""
    model = held.model
    if session.scalar(select(model.id).where(_held(held))) is None:
        raise LostRace(f"the claim on {held.kind} {held.entity_id} is no longer held")


def claim_guard(model: type[Any], held: Claim) -> ColumnElement[bool]:
    """A ``WHERE`` clause true only for rows of the claimed entity while the claim is held."""
    if model is held.model:
        return _held(held)
    if held.kind == "cluster" and (model is Node or model is LaunchIntent):
        held_cluster = exists().where(_held(held))
        return and_(model.cluster_id == held.entity_id, held_cluster)
    raise TypeError(f"no claim guard for {model.__name__} under a {held.kind} claim")
