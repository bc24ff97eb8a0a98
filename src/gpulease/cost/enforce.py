"""What a budget does, as pure functions of a snapshot: the budget loop's ``decide`` and the
launch guard's check.

:func:`decide_budget` turns a :class:`BudgetSnapshot` (the budget, its period, its spend, the
events already recorded this period, the scope's running clusters and managed jobs) into
:data:`BudgetAction` s: past ``warn_at`` one :class:`Warn` per period; at 100 % one
:class:`Exceeded` per period, and for ``stop`` / ``down`` a :class:`StopCluster` for each running
cluster of the scope (``down``: terminate; ``stop`` leaves a cluster whose provider cannot stop
running, it is not terminated behind the user's back) and a :class:`StopJob` for each running
managed job (checkpoint and stop). :func:`launch_refusal` is ``block``'s rule: the message
refusing a launch, or None. Moves no states (``server.budget_loop`` carries the actions out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from gpulease.cost.budgets import Budget


@dataclass(frozen=True, slots=True)
class ClusterRef:
    """A cluster of the scope that runs (or is about to): not a managed job's attempt."""

    id: int
    name: str
    status: str  # the ClusterStatus value
    stoppable: bool = True  # its provider can stop (and start) instances


@dataclass(frozen=True, slots=True)
class JobRef:
    """A managed job of the scope whose task runs and was not asked to stop yet."""

    id: int
    name: str


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    budget: Budget
    now: float
    label: str  # the period (2026-12, 2026-W49, 2026-12-01)
    spend: float
    recorded: frozenset[str] = frozenset()  # events of this period: "warn", "exceeded"
    clusters: tuple[ClusterRef, ...] = ()
    jobs: tuple[JobRef, ...] = ()

    @property
    def ratio(self) -> float:
        return self.spend / self.budget.limit


@dataclass(frozen=True, slots=True)
class Warn:
    message: str


@dataclass(frozen=True, slots=True)
class Exceeded:
    message: str


@dataclass(frozen=True, slots=True)
class StopCluster:
    id: int
    name: str
    reason: str
    down: bool  # terminate rather than stop


@dataclass(frozen=True, slots=True)
class StopJob:
    id: int
    name: str
    reason: str


BudgetAction: TypeAlias = Warn | Exceeded | StopCluster | StopJob
STOPPABLE = frozenset({"running", "succeeded", "failed"})  # what `stop` accepts


def reason_of(budget: Budget, spend: float) -> str:
    """``budget team-monthly: $512.30 of $500.00`` (history reasons, messages)."""
    return f"budget {budget.name}: ${spend:.2f} of ${budget.limit:.2f}"


def decide_budget(snap: BudgetSnapshot) -> list[BudgetAction]:
    """The actions of one step for the snapshot's budget (possibly none)."""
    budget, actions = snap.budget, list[BudgetAction]()
    reason = reason_of(budget, snap.spend)
    if snap.ratio >= budget.warn_at and "warn" not in snap.recorded:
        share = f"{100 * snap.ratio:.0f} %"
        actions.append(Warn(f"{reason} ({share}, warn at {100 * budget.warn_at:.0f} %) "
                            f"in {snap.label}"))  # fmt: skip
    if snap.ratio < 1.0:
        return actions
    if "exceeded" not in snap.recorded:
        what = f"{reason} in {snap.label}: the limit is reached ({budget.action})"
        actions.append(Exceeded(what))
    if budget.action == "block":
        return actions
    down = budget.action == "down"
    for cluster in snap.clusters:
        if down or (cluster.stoppable and cluster.status in STOPPABLE):
            actions.append(StopCluster(cluster.id, cluster.name, reason, down))
    actions.extend(StopJob(job.id, job.name, reason) for job in snap.jobs)
    return actions


def launch_refusal(budget: Budget, spend: float, estimate: float | None) -> str | None:
    """``block``'s rule for one launch in the budget's scope: refused when the period's spend has
    reached the limit, or when spend plus the plan's estimated cost (None: the task has no
    estimate) would pass it. The message names the budget, its spend and its limit."""
    if budget.action != "block":
        return None
    head = f"budget {budget.name} ({budget.period})"
    if spend >= budget.limit:
        return (f"{head} has spent ${spend:.2f} of its ${budget.limit:.2f} limit: launch refused "
                "(--over-budget launches anyway)")  # fmt: skip
    if estimate is not None and spend + estimate > budget.limit:
        return (
            f"{head} has spent ${spend:.2f} of its ${budget.limit:.2f} limit and this plan "
            f"is estimated at ${estimate:.2f}: launch refused (--over-budget launches anyway)"
        )
    return None
