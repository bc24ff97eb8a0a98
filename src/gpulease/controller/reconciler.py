"""The cluster reconcile loop: which clusters are due and one step each, on the reconcile
skeleton (:mod:`~gpulease.controller.skeleton`: claim → snapshot → pure decision → apply →
per-entity backoff).

A step builds the cluster's :class:`Snapshot` (:mod:`~gpulease.controller.observe`), asks
:func:`~gpulease.controller.decide.decide` for one step and applies it
(:mod:`~gpulease.controller.apply`). Clusters in a transient status are due on every pass;
resting ones (SUCCEEDED, FAILED, STOPPED) every ``resting_every_s``, and only when they have work:
an autostop to watch, or nodes left TERMINATING or LOST (so a hundred idle clusters cost
nothing). Moves states only through the applier.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from sqlalchemy import Engine, exists, or_, select, update

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.controller.accrual import Accrual
from gpulease.controller.actions import Action
from gpulease.controller.apply import Applier
from gpulease.controller.decide import decide
from gpulease.controller.observe import Observer
from gpulease.controller.ports import AgentConnector
from gpulease.controller.rules import ReconcileConfig
from gpulease.controller.skeleton import ClaimedLoop, LoopSettings, StepOutcome, worker_prefix
from gpulease.controller.snapshot import Snapshot
from gpulease.controller.storage_accrual import StorageAccrual
from gpulease.controller.sweep import sweep_orphans
from gpulease.providers.base import Provider
from gpulease.state import Claim, ClusterStatus, NodeState, session_scope
from gpulease.state.claims import Claimable
from gpulease.state.models import Cluster, Job, Node, Pool

log = logging.getLogger("gpulease.controller")

__all__ = ["ACTIVE", "RESTING", "Reconciler", "release_stale", "worker_prefix"]

RESTING = frozenset({ClusterStatus.SUCCEEDED, ClusterStatus.FAILED, ClusterStatus.STOPPED})
ACTIVE = frozenset(ClusterStatus) - RESTING - {ClusterStatus.TERMINATED}


class Reconciler(ClaimedLoop[Snapshot, Action]):
    """The cluster loop: an :class:`~gpulease.controller.skeleton.EntityLoop` over cluster rows,
    driven by its :class:`~gpulease.controller.skeleton.Skeleton`."""

    kind = "cluster"
    model: Claimable = Cluster

    def __init__(
        self,
        engine: Engine,
        providers: Mapping[str, Provider],
        agents: AgentConnector,
        *,
        clock: Clock,
        owner: str,
        config: ReconcileConfig | None = None,
        settings: LoopSettings | None = None,
        storage: StorageAccrual | None = None,
    ) -> None:
        super().__init__(engine, clock=clock, owner=owner, settings=settings)
        self.providers = providers
        self.agents = agents
        self.config = config or ReconcileConfig()
        self.observer = Observer(providers, agents)
        self.accrual = Accrual(engine, providers, clock)
        self.storage = storage  # the checkpoint stores' storage rows (the server builds one)

    # ---- the loop ---------------------------------------------------------------------------

    def due(self) -> list[int]:
        now = self.clock.now()
        resting_before = now - self.settings.resting_every_s
        leftovers = exists().where(
            Node.cluster_id == Cluster.id, Node.state.in_([NodeState.TERMINATING, NodeState.LOST])
        )
        stmt = (
            select(Cluster.id)
            .where(
                or_(
                    Cluster.status.in_(list(ACTIVE)),
                    Cluster.status.in_(list(RESTING))
                    & or_(Cluster.autostop_minutes.is_not(None), leftovers)
                    & or_(
                        Cluster.last_processed_at.is_(None),
                        Cluster.last_processed_at <= resting_before,
                    ),
                )
            )
            .order_by(Cluster.id)
        )
        with session_scope(self.engine) as session:
            return list(session.scalars(stmt))

    def run_pass(self) -> bool:
        """One step for every due cluster, then the cost ledger brought up to now — the nodes'
        rows, then the checkpoint stores' (:mod:`~gpulease.controller.storage_accrual`; its
        writes are bookkeeping, not progress); True when any step changed something."""
        progress = self.skeleton.run_pass()
        try:
            self.accrual.run()
        except Exception:  # the ledger catches up on the next pass; the loop must go on
            log.exception("cost accrual failed")
        if self.storage is not None:
            try:
                self.storage.run()
            except Exception:  # as above: the open rows are read again on the next pass
                log.exception("checkpoint storage accrual failed")
        return progress

    def reconcile(self, cluster_id: int) -> bool:
        """Claim the cluster, take one step, release it. False when it was claimed elsewhere,
        backs off or nothing changed."""
        return self.skeleton.step(cluster_id)

    # ---- EntityLoop -------------------------------------------------------------------------

    def snapshot(self, cluster_id: int, retry_at: float | None) -> Snapshot | None:
        snap = self.observer.snapshot(
            self.engine, cluster_id, now=self.clock.now(), retry_at=retry_at
        )
        if snap is not None:
            self.accrual.seen_running(snap)
        return snap

    def decide(self, snap: Snapshot) -> list[Action]:
        return decide(snap, self.config)

    def apply(self, snap: Snapshot, actions: Sequence[Action], held: Claim) -> StepOutcome:
        if not actions:
            return StepOutcome()
        applier = Applier(
            self.engine,
            self.providers,
            self.agents,
            claim=held,
            actor=self.worker,
            clock=self.clock,
            backoff=lambda n: backoff_delay(n, cap=self.settings.error_backoff_cap_s),
        )
        return applier.apply(snap, list(actions))

    # ---- housekeeping -----------------------------------------------------------------------

    def sweep(self) -> list[str]:
        return sweep_orphans(self.engine, self.providers, self.owner)

    def release_stale_claims(self) -> int:
        """Clear the claims (on clusters, jobs and pools) a previous server process on this host
        left behind (it died holding them; one server runs per home, so any other worker of ours
        here is dead)."""
        return release_stale(self.engine, self.owner, self.worker)


def release_stale(engine: Engine, owner: str, worker: str) -> int:
    prefix = worker_prefix(owner)
    released = 0
    with session_scope(engine) as session:
        for model in (Cluster, Job, Pool):
            stmt = (
                update(model)
                .where(model.lock_worker.startswith(prefix, autoescape=True))
                .where(model.lock_worker != worker)
                .values(lock_worker=None, lock_token=None, lock_expires_at=None)
                .execution_options(synchronize_session=False)
            )
            released += int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
    return released
