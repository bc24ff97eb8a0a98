"""The budgets loop (``budgets:`` in the config) and ``block``'s launch guard.

Each pass steps every budget — one entity per budget — the way the shared reconcile skeleton
(:mod:`gpulease.controller.skeleton`) steps clusters and jobs: **snapshot → pure decision
(:func:`gpulease.cost.enforce.decide_budget`) → apply → per-entity error backoff** (capped,
jittered: :func:`gpulease.backoff.backoff_delay`; one entity's error never stops the others).
It does not run *on* :class:`~gpulease.controller.skeleton.Skeleton` itself, because the
skeleton's first step is a claim on the entity's own row and a budget has no row (it lives in the
config file; claims exist for ``clusters`` and ``jobs`` only), and it takes no cluster claims:

- its events are history rows (``status_changes``, ``entity_kind`` ``budget``, ``entity_id`` a
  stable number from the budget's name, ``to_status`` ``warn:<period>`` / ``exceeded:<period>``,
  the message as ``reason``), each written once per period — looked up before it is written, in
  the same transaction, by the server's single loop thread;
- ``stop`` / ``down`` move the scope's running clusters to STOPPING / TERMINATING through
  compare-and-set ``set_status`` as actor ``budget`` — the path a user's ``gpulease stop`` takes,
  which needs no claim; the cluster loop then does the provider work under its own claim;
- a running managed job is asked to checkpoint and stop through the job loop
  (:meth:`~gpulease.controller.job_loop.JobReconciler.stop_for_budget`), under the job's claim.

States moved: clusters → STOPPING | TERMINATING (reason ``budget team-monthly: $512.30 of
$500.00``); managed jobs via the job loop (→ FAILED ``budget`` once the task stopped).
"""

from __future__ import annotations

import getpass
import logging
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.backoff import backoff_delay
from gpulease.clock import Clock
from gpulease.cost.budgets import Budget, budgets_of, period_bounds, period_label
from gpulease.cost.enforce import (
    BudgetAction,
    BudgetSnapshot,
    ClusterRef,
    Exceeded,
    JobRef,
    StopCluster,
    StopJob,
    Warn,
    decide_budget,
    launch_refusal,
)
from gpulease.cost.spend import scope_spend
from gpulease.errors import UserInputError
from gpulease.providers.base import Provider, SupportsStopStart
from gpulease.state import (
    Cluster,
    ClusterStatus,
    InvalidTransition,
    Job,
    JobStatus,
    StatusChange,
    session_scope,
    set_status,
)

log = logging.getLogger("gpulease.budgets")
ACTOR = "budget"
_C = ClusterStatus
_BILLED = [_C.PROVISIONING, _C.SETTING_UP, _C.RUNNING, _C.SUCCEEDED, _C.FAILED, _C.STARTING]


class OverBudget(UserInputError):
    """A ``block`` budget refused a launch (exit 2; ``--over-budget`` launches anyway)."""


def budget_entity_id(name: str) -> int:
    """The stable ``entity_id`` of a budget's history rows."""
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def os_user() -> str:
    """The user ledger rows and launches are counted under (the server's OS user, today)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def spec_name(document: Mapping[str, object] | None) -> str | None:
    """The task name of a cluster's or job's document (its spec's ``name``), as the ledger
    records it (None: the task has none)."""
    spec = (document or {}).get("spec")
    name = spec.get("name") if isinstance(spec, dict) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True, slots=True)
class BudgetState:
    """One budget's figures now (``gpulease status``, /metrics)."""

    budget: Budget
    label: str
    spend: float

    def view(self) -> dict[str, object]:
        b = self.budget
        return {"name": b.name, "period": b.period, "label": self.label, "limit": b.limit,
                "spend": self.spend, "ratio": self.spend / b.limit, "warn_at": b.warn_at,
                "action": b.action, "scope": b.scope.describe(),
                "line": b.status_line(self.spend)}  # fmt: skip


class BudgetLoop:
    """Steps every budget on each pass; :meth:`check_launch` is ``block``'s guard."""

    kind = "budget"

    def __init__(
        self,
        engine: Engine,
        budgets: Sequence[Budget],
        *,
        clock: Clock,
        stop_job: Callable[[int, str], bool] = lambda _job, _why: False,
        user: str | None = None,
        can_stop: Callable[[str], bool] = lambda _provider: True,
        error_backoff_cap_s: float = 30.0,
    ) -> None:
        self.engine = engine
        self.budgets = tuple(budgets)
        self.clock = clock
        self.stop_job = stop_job
        self.user = user or os_user()
        self.can_stop = can_stop
        self.cap = error_backoff_cap_s
        self.errors: dict[str, int] = {}
        self.error_until: dict[str, float] = {}

    # ---- figures ----------------------------------------------------------------------------

    def spend(self, session: Session, budget: Budget, now: float) -> float:
        start, _end = period_bounds(budget.period, now)
        return scope_spend(session, budget.scope, start, now)

    def states(self) -> list[BudgetState]:
        now = self.clock.now()
        with session_scope(self.engine) as session:
            return [BudgetState(b, period_label(b.period, now), self.spend(session, b, now))
                    for b in self.budgets]  # fmt: skip

    # ---- the guard --------------------------------------------------------------------------

    def check_launch(self, *, task_name: str | None, providers: Iterable[str],
                     estimate: float | None, over_budget: bool = False) -> None:  # fmt: skip
        """Raise :class:`OverBudget` when a ``block`` budget whose scope holds the launch (a
        launch may go to any of its plans' ``providers``) refuses it; ``over_budget`` skips it
        (logged)."""
        wanted = frozenset(providers)
        now = self.clock.now()
        with session_scope(self.engine) as session:
            for budget in self.budgets:
                if budget.action != "block" or not any(
                    budget.scope.matches(provider=p, task_name=task_name, user=self.user)
                    for p in wanted
                ):
                    continue
                refusal = launch_refusal(budget, self.spend(session, budget, now), estimate)
                if refusal is None:
                    continue
                if over_budget:
                    log.warning("launch of %s over budget (--over-budget): %s", task_name, refusal)
                    continue
                raise OverBudget(refusal)

    # ---- the loop ---------------------------------------------------------------------------

    def run_pass(self) -> bool:
        progress = False
        for budget in self.budgets:
            progress |= self.step(budget)
        return progress

    def step(self, budget: Budget) -> bool:
        now = self.clock.now()
        if now < self.error_until.get(budget.name, float("-inf")):
            return False
        try:
            snap = self.snapshot(budget)
            changed = self.apply(snap, decide_budget(snap))
        except Exception as exc:
            errors = self.errors[budget.name] = self.errors.get(budget.name, 0) + 1
            delay = backoff_delay(errors, cap=self.cap)
            self.error_until[budget.name] = self.clock.now() + delay
            log.warning("budget %s: step failed (%d in a row; next try in %.1f s): %s: %s",
                        budget.name, errors, delay, type(exc).__name__, exc)  # fmt: skip
            return False
        self.errors.pop(budget.name, None)
        self.error_until.pop(budget.name, None)
        return changed

    def snapshot(self, budget: Budget) -> BudgetSnapshot:
        now = self.clock.now()
        label = period_label(budget.period, now)
        with session_scope(self.engine) as session:
            spend = self.spend(session, budget, now)
            recorded = self._recorded(session, budget, label)
            clusters = tuple(
                ClusterRef(c.id, c.name, c.status.value, self.can_stop(c.provider))
                for c in session.scalars(select(Cluster).where(Cluster.status.in_(_BILLED),
                                                               Cluster.job_id.is_(None)))
                if self._in_scope(budget, c)
            )  # fmt: skip
            jobs = tuple(self._jobs(session, budget))
        return BudgetSnapshot(budget, now, label, spend, recorded, clusters, jobs)

    def _in_scope(self, budget: Budget, cluster: Cluster) -> bool:
        return budget.scope.matches(provider=cluster.provider, task_name=spec_name(cluster.task),
                                    user=self.user)  # fmt: skip

    def _jobs(self, session: Session, budget: Budget) -> Iterable[JobRef]:
        running = select(Job).where(Job.status == JobStatus.RUNNING, Job.pending_stop.is_(None))
        for job in session.scalars(running):
            cluster = session.get(Cluster, job.cluster_id) if job.cluster_id else None
            if cluster is not None and budget.scope.matches(
                provider=cluster.provider, task_name=spec_name(job.task), user=self.user
            ):
                yield JobRef(job.id, job.name)

    def _recorded(self, session: Session, budget: Budget, label: str) -> frozenset[str]:
        stmt = select(StatusChange.to_status).where(
            StatusChange.entity_kind == "budget",
            StatusChange.entity_id == budget_entity_id(budget.name),
            StatusChange.to_status.in_([f"warn:{label}", f"exceeded:{label}"]),
        )
        return frozenset(s.split(":", 1)[0] for s in session.scalars(stmt))

    def apply(self, snap: BudgetSnapshot, actions: Sequence[BudgetAction]) -> bool:
        changed = False
        for action in actions:
            if isinstance(action, Warn | Exceeded):
                changed |= self._event(snap, action)
            elif isinstance(action, StopCluster):
                changed |= self._stop_cluster(snap, action)
            elif isinstance(action, StopJob) and self.stop_job(action.id, action.reason):
                log.warning("job %s: asked to checkpoint and stop: %s", action.name, action.reason)
                changed = True
        return changed

    def _event(self, snap: BudgetSnapshot, action: Warn | Exceeded) -> bool:
        kind = "warn" if isinstance(action, Warn) else "exceeded"
        to = f"{kind}:{snap.label}"
        entity = budget_entity_id(snap.budget.name)
        with session_scope(self.engine) as session:
            seen = session.scalar(select(StatusChange.id).where(
                StatusChange.entity_kind == "budget", StatusChange.entity_id == entity,
                StatusChange.to_status == to))  # fmt: skip
            if seen is not None:
                return False
            session.add(StatusChange(entity_kind="budget", entity_id=entity, from_status=None,
                                     to_status=to, at=snap.now, actor=ACTOR,
                                     reason=action.message))  # fmt: skip
        log.warning("%s", action.message)
        return True

    def _stop_cluster(self, snap: BudgetSnapshot, action: StopCluster) -> bool:
        to = _C.TERMINATING if action.down else _C.STOPPING
        with session_scope(self.engine) as session:
            cluster = session.get(Cluster, action.id)
            if cluster is None or cluster.status not in _BILLED:
                return False
            try:
                moved = set_status(session, cluster, to, actor=ACTOR, reason=action.reason,
                                   now=snap.now)  # fmt: skip
            except InvalidTransition as exc:
                log.info("cluster %s: %s", action.name, exc)
                return False
        if moved:
            log.warning("cluster %s → %s: %s", action.name, to.value, action.reason)
        return bool(moved)


def budget_events(session: Session, budget: Budget) -> list[StatusChange]:
    """A budget's recorded events, oldest first."""
    stmt = (
        select(StatusChange)
        .where(StatusChange.entity_kind == "budget",
               StatusChange.entity_id == budget_entity_id(budget.name))
        .order_by(StatusChange.id)
    )  # fmt: skip
    return list(session.scalars(stmt))


def budget_loop(
    engine: Engine,
    config: Mapping[str, object],
    providers: Mapping[str, Provider],
    *,
    clock: Clock,
    stop_job: Callable[[int, str], bool],
) -> BudgetLoop | None:
    """The loop of the config's ``budgets:`` (None when it has none); a bad entry raises
    :class:`~gpulease.errors.UserInputError` naming it (the server exits 2)."""
    budgets = budgets_of(config)
    if not budgets:
        return None

    def can_stop(provider: str) -> bool:
        return isinstance(providers.get(provider), SupportsStopStart)

    return BudgetLoop(engine, budgets, clock=clock, stop_job=stop_job, can_stop=can_stop)


def budget_families(states: Sequence[BudgetState]) -> list[Metric]:
    """``gpulease_budget_spend_usd`` / ``_limit_usd`` / ``_warn_ratio`` by ``budget``."""
    spend = GaugeMetricFamily("gpulease_budget_spend_usd",
                              "dollars a budget's scope spent in its current period",
                              labels=["budget"])  # fmt: skip
    limit = GaugeMetricFamily("gpulease_budget_limit_usd", "a budget's limit per period",
                              labels=["budget"])  # fmt: skip
    warn = GaugeMetricFamily(
        "gpulease_budget_warn_ratio", "a budget's warn_at (share of the limit)", labels=["budget"]
    )
    for state in states:
        b = state.budget
        spend.add_metric([b.name], state.spend)
        limit.add_metric([b.name], b.limit)
        warn.add_metric([b.name], b.warn_at)
    return [spend, limit, warn]
