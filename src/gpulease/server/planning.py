"""Plans for a launch: the optimizer over the catalog with this install's run-time offers
(:mod:`gpulease.catalog.runtime`), and the ranked launch targets a cluster keeps for failover.
Moves no states.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection

from gpulease.catalog import Catalog
from gpulease.controller.acceptance_store import Offer
from gpulease.errors import UserInputError
from gpulease.optimizer import Plan, plan_all
from gpulease.spec import Task
from gpulease.state import LaunchTarget


class NoLaunchablePlan(UserInputError):
    """No plan for the task can be rented from this install (the task asks for what it cannot
    rent: bad input, exit code 2)."""


def target_of(plan: Plan) -> LaunchTarget:
    """The launch target of ``plan``; a CPU-only plan (any provider's CPU instance, the local
    ``local-cpu``) launches with no accelerator and 0 GPUs."""
    return LaunchTarget(
        provider=plan.provider,
        region=plan.region,
        zone=plan.zone,
        instance_type=plan.instance_type,
        accelerator=None if plan.cpu_only else plan.accelerator,
        gpus_per_node=0 if plan.cpu_only else plan.gpus_per_node,
        num_nodes=plan.num_nodes,
        pricing=plan.pricing,
        price_per_hour=plan.price_per_hour,
    )


def launch_targets(
    task: Task,
    catalog: Catalog,
    launchable: frozenset[str],
    *,
    top: int = 10,
    degraded: Collection[Offer] = (),
) -> list[LaunchTarget]:
    """The launchable plans for ``task``, best first (fewest GPUs first among equal prices;
    ``degraded`` offers last)."""
    return launch_targets_and_estimate(task, catalog, launchable, top=top, degraded=degraded)[0]


def launch_targets_and_estimate(
    task: Task,
    catalog: Catalog,
    launchable: frozenset[str],
    *,
    top: int = 10,
    degraded: Collection[Offer] = (),
) -> tuple[list[LaunchTarget], float | None]:
    """:func:`launch_targets`, and the first plan's expected cost in dollars (None: the task
    gives no estimate — a budget then refuses it only at its limit). ``degraded``: offers
    (provider, region, instance type) that delivered a node failing acceptance lately
    (``controller.acceptance_store.degraded_offers``): ranked after every other plan, in the
    optimizer's order among themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_all(task, catalog=catalog, top=top, launchable=launchable)
    plans = [p for p in result.plans if p.launchable]
    if not plans:
        why = "; ".join(r.reason for r in result.rejected[:3]) or "no offer fits"
        raise NoLaunchablePlan(
            f"no plan can be launched from this install ({', '.join(sorted(launchable))}): {why}"
        )
    ranked = ranked_down(_fewest_gpus_among_ties(plans), degraded)
    estimate = ranked[0].est_cost.expected if ranked[0].est_cost else None
    return [target_of(p) for p in ranked], estimate


def ranked_down(plans: list[Plan], degraded: Collection[Offer]) -> list[Plan]:
    """The plans with the ``degraded`` offers moved last (a stable sort: the order is kept
    otherwise)."""
    if not degraded:
        return plans
    return sorted(plans, key=lambda p: (p.provider, p.region, p.instance_type) in degraded)


def _fewest_gpus_among_ties(plans: list[Plan]) -> list[Plan]:
    """The optimizer's order, except that among plans it cannot tell apart (same hourly price
    and expected cost) those with fewer GPUs come first — no fake GPU is taken for nothing."""
    first_of: dict[tuple[float, float | None], int] = {}
    for i, plan in enumerate(plans):
        cost = plan.est_cost.expected if plan.est_cost else None
        first_of.setdefault((round(plan.price_per_hour, 6), cost), i)

    def key(plan: Plan) -> tuple[int, int]:
        cost = plan.est_cost.expected if plan.est_cost else None
        return first_of[(round(plan.price_per_hour, 6), cost)], plan.total_gpus

    return sorted(plans, key=key)


def expected_hours(task: Task, catalog: Catalog, launchable: frozenset[str]) -> float | None:
    """The best launchable plan's expected run time (hours), when the task's workload gives
    one; the spot policy's job length."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = plan_all(task, catalog=catalog, top=1, launchable=launchable)
    for plan in result.plans:
        if plan.launchable and plan.est_hours is not None:
            return float(plan.est_hours.expected)
    return None
