"""The pools loop: which pools are due, a snapshot of each (its row, its node clusters and their
nodes, the managed jobs waiting for it), one step of
:func:`~gpulease.controller.pool_rules.decide_pool`, carried out — on the shared reconcile
skeleton (claims of kind ``pool``).

A node is created by writing its cluster row (with its launch intent and ``pool_id``) in the
pool's step; the cluster loop launches it by intent (idempotently), runs the pool's setup on it
once, and leaves it SUCCEEDED: idle. An idle node is removed by moving it SUCCEEDED → TERMINATING
compare-and-set, so a managed job that takes it at the same moment (SUCCEEDED → SETTING_UP, also
compare-and-set: :mod:`~gpulease.controller.pool_jobs`) and the removal never both win. States
moved: pool statuses (through ``set_status``, guarded by the claim), node clusters →
TERMINATING; ``pools.desired_nodes`` and ``pools.decisions`` are written with each decision.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.controller.document import LaunchDocument
from gpulease.controller.pool_jobs import waiting_jobs
from gpulease.controller.pool_rules import (
    LAUNCH_BACKOFF_S,
    AddNodes,
    DropNodes,
    NodeClusterView,
    PoolAction,
    PoolDocument,
    PoolSnapshot,
    PoolView,
    Record,
    RemoveIdle,
    SetPool,
    decide_pool,
)
from gpulease.controller.skeleton import ClaimedLoop, StepOutcome, held_session
from gpulease.state import (
    Claim,
    Cluster,
    ClusterStatus,
    InvalidTransition,
    Pool,
    PoolStatus,
    create_cluster,
    list_nodes,
    session_scope,
    set_status,
)
from gpulease.state.claims import Claimable
from gpulease.state.machines import allowed
from gpulease.state.status import record_created

log = logging.getLogger("gpulease.controller.pools")

ACTOR = "pools"
MAX_DECISIONS = 100
_C = ClusterStatus


def node_name(pool_name: str, pool_id: int) -> str:
    """A fresh node cluster's name: ``<pool>-<pool id>-<random>`` (a valid cluster name)."""
    suffix = f"-{pool_id}-{secrets.token_hex(3)}"
    base = re.sub(r"[^A-Za-z0-9._-]", "-", pool_name).strip("-._") or "pool"
    return base[: 63 - len(suffix)] + suffix


def pool_nodes(session: Session, pool_id: int) -> list[NodeClusterView]:
    """The pool's node clusters not TERMINATED, oldest first, as views."""
    stmt = (
        select(Cluster)
        .where(Cluster.pool_id == pool_id, Cluster.status != _C.TERMINATED)
        .order_by(Cluster.id)
    )
    views: list[NodeClusterView] = []
    for c in session.scalars(stmt):
        states = tuple(n.state for n in list_nodes(session, c.id))
        views.append(NodeClusterView(
            id=c.id, name=c.name, status=c.status, status_changed_at=c.status_changed_at,
            job_id=c.job_id, failure=c.failure, num_nodes=c.num_nodes, node_states=states,
        ))  # fmt: skip
    return views


def create_pool(
    session: Session, *, name: str, doc: PoolDocument, owner: str, actor: str, now: float
) -> Pool:
    """Write a PENDING pool (its document in ``task``) and its creation history row."""
    pool = Pool(name=name, owner=owner, status=PoolStatus.PENDING, status_changed_at=now,
                task=doc.to_json(), desired_nodes=doc.sizing.min_nodes, decisions=[],
                created_at=now, updated_at=now)  # fmt: skip
    session.add(pool)
    session.flush()
    record_created(session, pool, actor=actor, reason="pool up")
    return pool


class PoolReconciler(ClaimedLoop[PoolSnapshot, PoolAction]):
    """The pools loop: an :class:`~gpulease.controller.skeleton.EntityLoop` over pool rows,
    driven by its :class:`~gpulease.controller.skeleton.Skeleton` (claims on ``pools``)."""

    kind = "pool"
    model: Claimable = Pool

    def due(self) -> list[int]:
        with session_scope(self.engine) as session:
            stmt = select(Pool.id).where(Pool.status != PoolStatus.DOWN).order_by(Pool.id)
            return list(session.scalars(stmt))

    # ---- EntityLoop -------------------------------------------------------------------------

    def snapshot(self, pool_id: int, retry_at: float | None = None) -> PoolSnapshot | None:
        with session_scope(self.engine) as session:
            row = session.get(Pool, pool_id)
            if row is None:
                return None
            view = PoolView(
                id=row.id, name=row.name, status=row.status,
                status_changed_at=row.status_changed_at, doc=PoolDocument.from_json(row.task),
                desired_nodes=row.desired_nodes,
            )  # fmt: skip
            nodes = tuple(pool_nodes(session, pool_id))
            waiting = len(waiting_jobs(session, row.name))
        return PoolSnapshot(self.clock.now(), view, nodes, waiting, retry_at)

    def decide(self, snap: PoolSnapshot) -> list[PoolAction]:
        return decide_pool(snap)

    def apply(self, snap: PoolSnapshot, actions: Sequence[PoolAction], held: Claim) -> StepOutcome:
        handlers: Mapping[type, Callable[[PoolSnapshot, Any], bool]] = {
            SetPool: self._set_pool,
            AddNodes: self._add_nodes,
            RemoveIdle: self._remove_idle,
            DropNodes: self._drop_nodes,
            Record: self._record,
        }
        self._held = held
        outcome = StepOutcome()
        try:
            for action in actions:
                outcome.progress |= handlers[type(action)](snap, action)
                if isinstance(action, DropNodes) and action.launch_failed:
                    outcome.retry_after = LAUNCH_BACKOFF_S  # handed to the next snapshots
        finally:
            self._held = None
        return outcome

    @contextmanager
    def _writing(self) -> Iterator[Session]:
        """A transaction of this step: raises ``LostRace`` when the pool's claim is gone."""
        with held_session(self.engine, self._held) as session:
            yield session

    # ---- actions ----------------------------------------------------------------------------

    def _set_pool(self, snap: PoolSnapshot, a: SetPool) -> bool:
        with self._writing() as session:
            row = session.get(Pool, snap.pool.id)
            if row is None:
                return False
            try:
                moved = set_status(session, row, a.status, actor=ACTOR, reason=a.reason,
                                   now=snap.now, claim=self._held)  # fmt: skip
            except InvalidTransition as exc:
                log.info("pool %s: %s", snap.pool.name, exc)
                return False
            if moved and a.status is PoolStatus.FAILED:
                row.last_error = a.reason
        if moved:
            log.info("pool %s: %s (%s)", snap.pool.name, a.status.value, a.reason)
        return moved

    def _add_nodes(self, snap: PoolSnapshot, a: AddNodes) -> bool:
        doc = snap.pool.doc
        if not doc.plans:
            return False
        node_doc = LaunchDocument(run=doc.run.model_copy(update={"run": None}), plans=doc.plans,
                                  spec=doc.spec)  # fmt: skip
        with self._writing() as session:
            for _ in range(a.count):
                cluster, _intent = create_cluster(
                    session, name=node_name(snap.pool.name, snap.pool.id), target=doc.plans[0],
                    task=node_doc.to_json(), owner=self.owner, actor=ACTOR, now=snap.now,
                )  # fmt: skip
                cluster.pool_id = snap.pool.id
        log.info("pool %s: %d node(s) added", snap.pool.name, a.count)
        return True

    def _remove_idle(self, snap: PoolSnapshot, a: RemoveIdle) -> bool:
        removed = 0
        for cluster_id in a.cluster_ids:
            with self._writing() as session:
                cluster = session.get(Cluster, cluster_id)
                if cluster is None or cluster.job_id is not None or cluster.pool_id is None:
                    continue
                if set_status(session, cluster, _C.TERMINATING, expected=_C.SUCCEEDED,
                              actor=ACTOR, reason=a.reason, now=snap.now):  # fmt: skip
                    removed += 1
        if removed:
            log.info("pool %s: %d idle node(s) removed", snap.pool.name, removed)
        return removed > 0

    def _drop_nodes(self, snap: PoolSnapshot, a: DropNodes) -> bool:
        dropped = 0
        for cluster_id in a.cluster_ids:
            with self._writing() as session:
                cluster = session.get(Cluster, cluster_id)
                if cluster is None or not allowed(cluster.status, _C.TERMINATING):
                    continue
                if cluster.status is _C.TERMINATING:
                    continue
                if set_status(session, cluster, _C.TERMINATING, actor=ACTOR, reason=a.reason,
                              now=snap.now):  # fmt: skip
                    dropped += 1
        return dropped > 0

    def _record(self, snap: PoolSnapshot, a: Record) -> bool:
        d = a.decision
        entry = {"at": snap.now, "add": d.add, "remove": list(d.remove), "desired": d.desired,
                 "waiting": a.waiting, "reason": d.reason}  # fmt: skip
        with self._writing() as session:
            row = session.get(Pool, snap.pool.id)
            if row is None:
                return False
            row.desired_nodes = d.desired
            if d.changes:
                row.decisions = [*row.decisions, entry][-MAX_DECISIONS:]
            row.updated_at = snap.now
        return True
