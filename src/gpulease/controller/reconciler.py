"""The cluster reconcile loop: which clusters are due, claiming them, and one step each.

:meth:`Reconciler.run_pass` claims every due cluster in turn (a claim with a token and expiry, so
two workers never step one cluster at once), builds its :class:`Snapshot`
(:mod:`~gpulease.controller.observe`), asks :func:`~gpulease.controller.decide.decide` for one
step and applies it (:mod:`~gpulease.controller.apply`), then releases the claim. Clusters in a
transient status are due on every pass; resting ones (SUCCEEDED, FAILED, STOPPED) every
``resting_every_s``, and only when they have work: an autostop to watch, or nodes left
TERMINATING or LOST (so a hundred idle clusters cost nothing). A failed step is logged and the
cluster backs off; the loop never dies of one cluster. Moves states only through the applier.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Engine, exists, or_, select, update

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.controller.apply import Applier, StepOutcome
from gpulease.controller.decide import decide
from gpulease.controller.observe import Observer
from gpulease.controller.ports import AgentConnector
from gpulease.controller.rules import ReconcileConfig
from gpulease.controller.sweep import sweep_orphans
from gpulease.providers.base import Provider
from gpulease.state import Claim, ClusterStatus, NodeState, claim, release, session_scope
from gpulease.state.models import Cluster, Node

log = logging.getLogger("gpulease.controller")

RESTING = frozenset({ClusterStatus.SUCCEEDED, ClusterStatus.FAILED, ClusterStatus.STOPPED})
ACTIVE = frozenset(ClusterStatus) - RESTING - {ClusterStatus.TERMINATED}


@dataclass(frozen=True, slots=True)
class LoopSettings:
    claim_ttl_s: float = 60.0
    resting_every_s: float = 10.0
    error_backoff_cap_s: float = 30.0


def worker_prefix(owner: str) -> str:
    return f"{owner}@{socket.gethostname()}:"


class Reconciler:
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
    ) -> None:
        self.engine = engine
        self.providers = providers
        self.agents = agents
        self.clock = clock
        self.owner = owner
        self.worker = f"{worker_prefix(owner)}{os.getpid()}"
        self.config = config or ReconcileConfig()
        self.settings = settings or LoopSettings()
        self.observer = Observer(providers, agents)
        self._retry_at: dict[int, float] = {}
        self._errors: dict[int, int] = {}

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
        """One step for every due cluster; True when any step changed something."""
        progress = False
        for cluster_id in self.due():
            progress |= self.reconcile(cluster_id)
        return progress

    def reconcile(self, cluster_id: int) -> bool:
        """Claim the cluster, take one step, release it. False when it was claimed elsewhere or
        nothing changed."""
        now = self.clock.now()
        with session_scope(self.engine) as session:
            held = claim(
                session, cluster_id, self.worker, until=now + self.settings.claim_ttl_s, now=now
            )
        if held is None:
            return False
        try:
            outcome = self._step(cluster_id, held)
        except Exception:
            log.exception("cluster %d: reconcile step failed", cluster_id)
            outcome = self._failed(cluster_id)
        finally:
            with session_scope(self.engine) as session:
                release(session, held, now=self.clock.now())
        return outcome.progress

    def _step(self, cluster_id: int, held: Claim) -> StepOutcome:
        now = self.clock.now()
        retry_at = self._retry_at.get(cluster_id)
        snap = self.observer.snapshot(self.engine, cluster_id, now=now, retry_at=retry_at)
        if snap is None:
            return StepOutcome()
        actions = decide(snap, self.config)
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
        outcome = applier.apply(snap, actions)
        if outcome.retry_after is not None:
            self._retry_at[cluster_id] = self.clock.now() + outcome.retry_after
        elif outcome.progress:
            self._retry_at.pop(cluster_id, None)
            self._errors.pop(cluster_id, None)
        return outcome

    def _failed(self, cluster_id: int) -> StepOutcome:
        errors = self._errors[cluster_id] = self._errors.get(cluster_id, 0) + 1
        delay = backoff_delay(errors, cap=self.settings.error_backoff_cap_s)
        self._retry_at[cluster_id] = self.clock.now() + delay
        return StepOutcome()

    # ---- housekeeping -----------------------------------------------------------------------

    def sweep(self) -> list[str]:
        return sweep_orphans(self.engine, self.providers, self.owner)

    def release_stale_claims(self) -> int:
        """Clear claims a previous server process on this host left behind (it died holding
        them; one server runs per home, so any other worker of ours here is dead)."""
        prefix = worker_prefix(self.owner)
        stmt = (
            update(Cluster)
            .where(Cluster.lock_worker.startswith(prefix, autoescape=True))
            .where(Cluster.lock_worker != self.worker)
            .values(lock_worker=None, lock_token=None, lock_expires_at=None)
            .execution_options(synchronize_session=False)
        )
        with session_scope(self.engine) as session:
            return int(session.execute(stmt).rowcount)  # type: ignore[attr-defined]
