"""The planner: task + catalog → ranked plans, the Pareto front, and every rejection explained.

Steps: (1) narrow the offer table by the task's hard constraints (:mod:`.constraints`);
(2) size each distinct hardware configuration once (:mod:`.sizing`); (3) price every offer ×
pricing model × node count as arrays (:mod:`.candidates`); (4) pick the best node count per offer
and pricing for the objective, rank, and explain (:mod:`.ranking`). Deterministic for the same
inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpulease.catalog import Catalog
from gpulease.catalog.types import OfferTable
from gpulease.errors import UserInputError
from gpulease.optimizer import spot_overhead
from gpulease.optimizer.candidates import Limits, PricingGrid, build_pricing_grid
from gpulease.optimizer.commitments import mark_user_prices, reserved_column, user_discounts
from gpulease.optimizer.constraints import apply_resource_constraints
from gpulease.optimizer.funnel import Funnel
from gpulease.optimizer.plan import OBJECTIVES, Objective, Plan, PlanResult, Pricing
from gpulease.optimizer.ranking import Context, explain, node_peaks, preference_filter, rank
from gpulease.optimizer.sizing import (
    MAX_OPTIONS,
    ConfigSizing,
    size_inference,
    size_training,
    size_without_workload,
)
from gpulease.policy import load_data_classes, resolve_data_classes
from gpulease.spec.models import Task

DEFAULT_MAX_NODES = 64
STALE_AFTER_DAYS = 30


def plan(task: Task, **options: Any) -> list[Plan]:
    """The ranked plans for ``task`` (see :func:`plan_all` for the options)."""
    return list(plan_all(task, **options).plans)


def plan_all(
    task: Task,
    *,
    catalog: Catalog | None = None,
    objective: str = "cheapest",
    top: int = 10,
    launchable: frozenset[str] = frozenset(),
    config: Mapping[str, Any] | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
    hours: float | None = None,
) -> PlanResult:
    """Enumerate, price and rank every feasible way to run ``task``.

    ``launchable`` names the providers this install can rent on; plans elsewhere are advice.
    ``hours`` is the run time of a task without a workload (there is nothing to estimate it
    from): every plan takes that long, so costs, the budget and the deadline can be checked,
    and ``fastest`` has a time to rank by.
    """
    if objective not in OBJECTIVES:
        raise UserInputError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if top < 1:
        raise UserInputError("top: must be at least 1")
    _check_run_hours(task, objective, hours)
    catalog = catalog or Catalog.load()
    if config is None:
        from gpulease.config import load_config

        config = load_config()
    offers = catalog.offers
    funnel = Funnel.of(len(offers))
    classes = (
        resolve_data_classes(task.data_policy, load_data_classes(config))
        if task.data_policy
        else []
    )
    countries = catalog.countries() if classes else np.array([], dtype=str)
    apply_resource_constraints(
        funnel,
        offers,
        task.resources,
        data_classes=classes,
        countries=countries,
        has_workload=task.workload is not None,
    )
    pricings = _pricings(task)
    discounts = user_discounts(config)
    prices_all = _price_columns(offers, pricings, task.resources.commitment)
    if "reserved" in prices_all and discounts:
        prices_all["reserved"] = reserved_column(offers, task.resources.commitment, discounts)
    _require_price(funnel, prices_all, pricings)
    index = np.flatnonzero(funnel.alive)
    sub = offers if index.size == len(offers) else offers.take(index)
    prices = {p: col[index] for p, col in prices_all.items()}
    first, config_of = _config_keys(offers, index)
    sizings = _size_configs(task, catalog, sub, first, max_nodes=max_nodes, hours=hours)
    ctx = Context(
        task=task,
        catalog=catalog,
        offers=sub,
        index=index,
        sizings=sizings,
        config_of=config_of,
        objective=objective,
        launchable=launchable,
        run_hours=hours,
    )
    ctx.peak_node = node_peaks(ctx)
    grids = _grids(
        task,
        sub,
        sizings,
        config_of,
        pricings=pricings,
        prices=prices,
        objective=objective,
        has_hours=ctx.has_hours,
    )
    explain(funnel, ctx, grids)
    preference_filter(funnel, ctx)
    plans, pareto = rank(ctx, grids, top)
    plans = mark_user_prices(plans, task.resources.commitment, discounts)
    pareto = mark_user_prices(pareto, task.resources.commitment, discounts)
    return PlanResult(
        plans=tuple(plans),
        pareto=tuple(pareto),
        rejected=tuple(funnel.rejected),
        objective=objective,
        notes=tuple(_notes(task, catalog, plans, hours)),
        offers_considered=len(offers),
        offers_feasible=int(np.count_nonzero(ctx.keep)),
    )


def _check_run_hours(task: Task, objective: str, hours: float | None) -> None:
    if hours is not None:
        if not (math.isfinite(hours) and hours > 0):
            raise UserInputError(f"hours: the run time must be a positive number, got {hours!r}")
        if task.workload is not None:
            raise UserInputError(
                "hours: the task has a workload, and its hours are estimated from it; "
                "leave --hours out (it is the run time of a task without a workload)"
            )
    elif objective == "fastest" and task.workload is None:
        raise UserInputError(
            "objective: fastest needs a run time to minimise, and the task has no workload to "
            "estimate it from; give the run time with --hours H (every plan then takes H hours, "
            "and the cheapest of them wins) or add a workload: section"
        )


def _pricings(task: Task) -> tuple[Pricing, ...]:
    spot = task.resources.use_spot
    chosen: list[Pricing] = ["spot"] if spot is True else ["on_demand"]
    if spot == "auto":
        chosen.append("spot")
    if task.resources.commitment != "none" and spot is not True:
        chosen.append("reserved")
    return tuple(chosen)


def _price_columns(
    offers: OfferTable, pricings: tuple[Pricing, ...], commitment: str
) -> dict[Pricing, np.ndarray]:
    columns: dict[Pricing, np.ndarray] = {}
    for pricing in pricings:
        if pricing == "on_demand":
            columns[pricing] = offers.price_on_demand
        elif pricing == "spot":
            columns[pricing] = offers.price_spot
        else:
            columns[pricing] = (
                offers.price_reserved_3y if commitment == "3y" else offers.price_reserved_1y
            )
    return columns


def _require_price(
    funnel: Funnel, prices: dict[Pricing, np.ndarray], pricings: tuple[Pricing, ...]
) -> None:
    priced = np.zeros(funnel.alive.shape[0], dtype=bool)
    for column in prices.values():
        priced |= np.isfinite(column)
    wanted = " or ".join(p.replace("_", "-") for p in pricings)
    funnel.apply(priced, f"no {wanted} price published for these offers")


def _config_keys(offers: OfferTable, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each configuration, configuration index of every row) among ``index``.

    A configuration is part × GPUs per node × fabric × network; the string codes are cached on
    the (full) offer table, so grouping costs one integer ``unique`` per plan.
    """
    if index.size == 0:
        return np.array([], dtype=np.int64), np.array([], dtype=np.int64)
    _, part_code = offers.codes("part")
    _, fabric_code = offers.codes("fabric")
    network = np.round(np.nan_to_num(offers.network_gbps[index], nan=-1.0)).astype(np.int64) + 1
    key = (
        (part_code[index].astype(np.int64) * 4096 + offers.gpu_count[index]) * 64
        + fabric_code[index]
    ) * 100_000 + network
    _, first, config_of = np.unique(key, return_index=True, return_inverse=True)
    return first, config_of


def _size_configs(
    task: Task,
    catalog: Catalog,
    sub: OfferTable,
    first: np.ndarray,
    *,
    max_nodes: int,
    hours: float | None,
) -> list[ConfigSizing]:
    workload = task.workload
    sizings: list[ConfigSizing] = []
    for row in first:
        spec = catalog.spec_for(str(sub.part[row]))
        gpn = int(sub.gpu_count[row])
        if workload is None:
            sizings.append(size_without_workload(task.num_nodes, hours))
        elif workload.kind == "inference":
            sizings.append(
                size_inference(workload, spec, gpus_per_node=gpn, fixed_nodes=task.num_nodes)
            )
        else:
            network = float(sub.network_gbps[row])
            known = math.isfinite(network)  # unknown network: not clustered, one node only
            sizings.append(
                size_training(
                    workload,
                    spec,
                    gpus_per_node=gpn,
                    fabric=str(sub.fabric[row]),
                    network_gbps=network if known else 0.0,
                    fixed_nodes=task.num_nodes,
                    max_nodes=max_nodes if known else 1,
                )
            )
    return sizings


def _grids(
    task: Task,
    sub: OfferTable,
    sizings: list[ConfigSizing],
    config_of: np.ndarray,
    *,
    pricings: tuple[Pricing, ...],
    prices: dict[Pricing, np.ndarray],
    objective: Objective,
    has_hours: bool,
) -> list[PricingGrid]:
    nodes_k = np.stack([s.nodes for s in sizings]) if sizings else np.empty((0, MAX_OPTIONS))
    hours_k = np.stack([s.hours for s in sizings]) if sizings else np.empty((0, MAX_OPTIONS, 3))
    used = np.flatnonzero(np.isfinite(nodes_k).any(axis=0))
    width = int(used[-1]) + 1 if used.size else 1  # options past the last used one are all NaN
    nodes_k, hours_k = nodes_k[:, :width], hours_k[:, :width]
    interval = task.checkpoint.sync_interval_hours if task.checkpoint else None
    limits = Limits(
        deadline_h=task.deadline_hours,
        budget_usd=task.budget_usd,
        max_price_per_hour=task.resources.max_price_per_hour,
        has_hours=has_hours,
    )
    return [
        build_pricing_grid(
            pricing,
            prices[pricing],
            config_of=config_of.astype(np.int64),
            band=sub.interruption_band.astype(np.int64),
            nodes_k=nodes_k,
            hours_k=hours_k,
            loss_h=spot_overhead.loss_per_interruption(interval),
            limits=limits,
            objective=objective,
        )
        for pricing in pricings
    ]


def _notes(task: Task, catalog: Catalog, plans: list[Plan], hours: float | None) -> list[str]:
    notes = []
    age = catalog.age_days()
    if age > STALE_AFTER_DAYS:
        notes.append(
            f"catalog prices are {age} days old (as of {catalog.as_of}); "
            "run `gpulease catalog update` for live prices"
        )
    if task.workload is None and hours is not None:
        notes.append(
            f"no workload given: every plan takes the {hours:g} h run time you gave, so cost is "
            "hours × price (spot plans include expected restarts)"
        )
    elif task.workload is None:
        notes.append(
            "no workload given: hours and cost can't be estimated, so plans are ranked "
            "by hourly price; add `workload:` (or --hours) for time and cost estimates"
        )
        if task.deadline_hours or task.budget_usd:
            notes.append("deadline and budget need a workload (or --hours) to be checked")
    if plans and not any(p.launchable for p in plans):
        notes.append("no plan is launchable from this install yet: plans are advice")
    if not plans:
        notes.append("no feasible plan: see the rejected offers for why")
    if (
        task.workload is not None
        and task.workload.kind != "inference"
        and math.isfinite(task.deadline_hours or math.nan)
    ):
        notes.append(f"deadline {task.deadline_hours:g} h is checked against the expected hours")
    return notes
