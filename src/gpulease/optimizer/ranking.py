"""Ranking and explaining: which cells of the candidate grid fail which constraint, the best node
count per offer and pricing for the objective, the top N, the Pareto front, and each plan's reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpulease.catalog import Catalog
from gpulease.catalog.types import OfferTable
from gpulease.optimizer.candidates import Grid
from gpulease.optimizer.explain import plan_reasons
from gpulease.optimizer.funnel import Funnel, examples
from gpulease.optimizer.plan import Objective, Plan, Range
from gpulease.optimizer.sizing import ConfigSizing
from gpulease.spec.models import Task

MAX_PARETO = 25
SHORTLIST = 16  # × top: rows sorted before the (rarely needed) rest


@dataclass(slots=True)
class Context:
    task: Task
    catalog: Catalog
    offers: OfferTable  # the offers that passed the hard constraints
    index: npt.NDArray[np.int64]  # their rows in the full table
    sizings: list[ConfigSizing]
    config_of: npt.NDArray[np.int64]
    objective: Objective
    launchable: frozenset[str]
    keep: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def precision(self) -> str:
        return self.task.workload.precision if self.task.workload else "bf16"


def _reject(funnel: Funnel, ctx: Context, bad: npt.NDArray[np.bool_], reason: str) -> None:
    passing = np.ones(funnel.alive.shape[0], dtype=bool)
    passing[ctx.index[bad]] = False
    funnel.apply(passing, reason)


def explain_grid(funnel: Funnel, ctx: Context, grid: Grid) -> None:
    """Reject offers with no feasible cell, one line per (constraint, accelerator) group."""
    m = len(ctx.offers)
    reasons = [sizing.infeasible or "" for sizing in ctx.sizings]
    templates = sorted(set(reasons) - {""})
    code = {template: k for k, template in enumerate(templates)}
    config_code = np.array([code.get(r, -1) for r in reasons], dtype=np.int64)
    offer_code = config_code[ctx.config_of] if m else np.zeros(0, np.int64)
    infeasible = offer_code >= 0
    for k, template in enumerate(templates):
        bad = offer_code == k
        counts = sorted(int(c) for c in np.unique(ctx.offers.gpu_count[bad]))
        gpus = ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "")
        _reject(funnel, ctx, bad, template.replace("{gpus}", gpus + str(counts[-1])))
    alive = ~infeasible
    stages: list[tuple[npt.NDArray[np.bool_], Callable[[npt.NDArray[np.bool_]], str]]] = [
        (
            grid.fits,
            lambda bad: (
                "spot: interruptions too frequent at these node counts to finish "
                f"({examples(ctx.offers.instance_type[bad])})"
            ),
        ),
        (grid.fits & grid.deadline_ok, lambda bad: _deadline_reason(ctx, grid, bad)),
        (grid.fits & grid.deadline_ok & grid.budget_ok, lambda bad: _budget_reason(ctx, grid, bad)),
        (grid.feasible, lambda bad: _price_cap_reason(ctx, grid, bad)),
    ]
    for ok, reason in stages:
        has = ok.any(axis=(0, 2)) if m else np.zeros(0, bool)
        bad = alive & ~has
        if bad.any():
            _reject(funnel, ctx, bad, reason(bad))
        alive &= has
    ctx.keep = alive


def _best_by_part(
    ctx: Context, values: npt.NDArray[np.float64], bad: npt.NDArray[np.bool_], fmt: str
) -> str:
    """``A100 (best 31 h), T4 (best 80 h)`` over the offers in ``bad``."""
    best_offer = np.min(np.where(np.isfinite(values), values, np.inf), axis=(0, 2))
    chosen = bad & np.isfinite(best_offer)
    parts, inverse = ctx.catalog.offers.codes("part")
    per_part = np.full(len(parts), np.inf)
    np.minimum.at(per_part, inverse[ctx.index][chosen], best_offer[chosen])
    ordered = sorted(
        ((float(v), str(parts[k])) for k, v in enumerate(per_part) if np.isfinite(v)),
    )
    shown = ", ".join(f"{part} (best {fmt.format(v)})" for v, part in ordered[:5])
    return shown + (f", … (+{len(ordered) - 5})" if len(ordered) > 5 else "")


def _deadline_reason(ctx: Context, grid: Grid, bad: npt.NDArray[np.bool_]) -> str:
    hours = np.where(grid.fits, grid.hours, np.nan)
    return f"too slow for the {ctx.task.deadline_hours:g} h deadline: " + _best_by_part(
        ctx, hours, bad, "{:.1f} h"
    )


def _budget_reason(ctx: Context, grid: Grid, bad: npt.NDArray[np.bool_]) -> str:
    cost = np.where(grid.fits & grid.deadline_ok, grid.cost, np.nan)
    return f"over the ${ctx.task.budget_usd:,.0f} budget: " + _best_by_part(
        ctx, cost, bad, "${:,.0f}"
    )


def _price_cap_reason(ctx: Context, grid: Grid, bad: npt.NDArray[np.bool_]) -> str:
    price = np.where(grid.fits & grid.deadline_ok & grid.budget_ok, grid.plan_price, np.nan)
    cap = ctx.task.resources.max_price_per_hour or 0.0
    return f"above max_price_per_hour ${cap:g}/h: " + _best_by_part(ctx, price, bad, "${:.2f}/h")


def preference_filter(funnel: Funnel, ctx: Context) -> None:
    """With an ordered accelerator list, keep only the first accelerator that has a plan."""
    request = ctx.task.resources.accelerators
    if request is None or not request.ordered or not ctx.keep.any():
        return
    for name in request.choices:
        has = ctx.keep & (ctx.offers.accelerator == name)
        if has.any():
            later = ctx.keep & ~has
            if later.any():
                _reject(
                    funnel,
                    ctx,
                    later,
                    f"lower in the preference order than {name}, which has feasible plans "
                    f"({examples(ctx.offers.accelerator[later])})",
                )
            ctx.keep = has
            return


def _peak_total(ctx: Context, grid: Grid) -> npt.NDArray[np.float64]:
    """Dense peak TFLOPS of every (offer, option) at the workload's precision: (m, L)."""
    precision = ctx.precision()
    parts, inverse = ctx.catalog.offers.codes("part")
    per_part = np.array(
        [ctx.catalog.spec_for(str(part)).peak_tflops(precision) for part in parts], dtype=float
    )
    gpu = per_part[inverse[ctx.index]]
    peak: npt.NDArray[np.float64] = (gpu * ctx.offers.gpu_count)[:, None] * grid.nodes
    return peak


def _scores(
    ctx: Context, grid: Grid, peak: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(primary, secondary) scores, lower is better, shape (P, m, L)."""
    workload = ctx.task.workload is not None
    cost = grid.cost if workload else grid.plan_price
    hours = grid.hours if workload else -np.broadcast_to(peak, grid.plan_price.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_tflop = grid.plan_price / peak[None]
    if ctx.objective == "fastest":
        return hours, cost
    if ctx.objective == "price-per-tflop":
        return per_tflop, cost
    return cost, hours


def rank(ctx: Context, grid: Grid, top: int) -> tuple[list[Plan], list[Plan]]:
    """The top ``top`` plans for the objective and the cost/time Pareto front."""
    if not ctx.keep.any():
        return [], []
    peak = _peak_total(ctx, grid)
    primary, secondary = _scores(ctx, grid, peak)
    ok = grid.feasible & ctx.keep[None, :, None]
    primary = np.where(ok, primary, np.inf)
    secondary = np.where(ok, secondary, np.inf)
    best_l = _best_option(primary, secondary)
    p_idx, m_idx = np.nonzero(
        np.isfinite(np.take_along_axis(primary, best_l[..., None], 2)[..., 0])
    )
    l_idx = best_l[p_idx, m_idx]
    keys = (
        grid.plan_price[p_idx, m_idx, l_idx],
        secondary[p_idx, m_idx, l_idx],
        primary[p_idx, m_idx, l_idx],
    )
    cells = ((int(p_idx[o]), int(m_idx[o]), int(l_idx[o])) for o in _ordered(keys, top * SHORTLIST))
    plans = _build_plans(ctx, grid, peak, cells, top)
    return plans, _pareto(ctx, grid, peak, ok)


def _ordered(keys: tuple[npt.NDArray[np.float64], ...], shortlist: int) -> Iterable[int]:
    """Indices sorted by ``keys`` (last key primary; stable). Sorts a shortlist of the best
    ``shortlist`` first, and everything only if the caller reads past it."""
    primary = keys[-1]
    n = primary.shape[0]
    if n > shortlist:
        threshold = np.partition(primary, shortlist - 1)[shortlist - 1]
        head = np.flatnonzero(primary <= threshold)
        yield from head[np.lexsort(tuple(k[head] for k in keys))].tolist()
        rest = np.flatnonzero(primary > threshold)
        yield from rest[np.lexsort(tuple(k[rest] for k in keys))].tolist()
        return
    yield from np.lexsort(keys).tolist()


def _best_option(
    primary: npt.NDArray[np.float64], secondary: npt.NDArray[np.float64]
) -> npt.NDArray[np.intp]:
    """Per (pricing, offer), the option with the lowest primary score, ties broken by the
    secondary score."""
    lowest = primary.min(axis=2, keepdims=True)
    tied = np.isfinite(primary) & (primary <= lowest + 1e-9 * np.abs(lowest))
    best: npt.NDArray[np.intp] = np.argmin(np.where(tied, secondary, np.inf), axis=2)
    return best


def _dedupe_key(ctx: Context, grid: Grid, cell: tuple[int, int, int]) -> tuple[object, ...]:
    p, i, opt = cell
    pricing = grid.pricings[p]
    zone = str(ctx.offers.zone[i]) if pricing == "spot" else ""
    return (
        str(ctx.offers.provider[i]),
        str(ctx.offers.region[i]),
        zone,
        str(ctx.offers.instance_type[i]),
        pricing,
        float(grid.nodes[i, opt]),
    )


def _build_plans(
    ctx: Context,
    grid: Grid,
    peak: npt.NDArray[np.float64],
    cells: Iterable[tuple[int, int, int]],
    limit: int,
) -> list[Plan]:
    plans: list[Plan] = []
    seen: set[tuple[object, ...]] = set()
    for cell in cells:
        key = _dedupe_key(ctx, grid, cell)
        if key in seen:
            continue
        seen.add(key)
        plans.append(
            _make_plan(
                ctx, grid, peak, cell, rank=len(plans) + 1, first=plans[0] if plans else None
            )
        )
        if len(plans) >= limit:
            break
    return plans


def _pareto(
    ctx: Context, grid: Grid, peak: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_]
) -> list[Plan]:
    workload = ctx.task.workload is not None
    cost = grid.cost if workload else grid.plan_price
    time = (
        grid.hours
        if workload
        else 1.0 / np.maximum(peak[None], 1e-9) * np.ones_like(grid.plan_price)
    )
    rows = _cheapest_per_group(ctx, grid, ok)
    cell_ok = (
        ok[rows[:, 0], rows[:, 1]]
        & np.isfinite(cost[rows[:, 0], rows[:, 1]])
        & np.isfinite(time[rows[:, 0], rows[:, 1]])
    )
    r_idx, l_idx = np.nonzero(cell_ok)
    p_idx, m_idx = rows[r_idx, 0], rows[r_idx, 1]
    c, t = cost[p_idx, m_idx, l_idx], time[p_idx, m_idx, l_idx]
    order = np.lexsort((c, t))  # stable: ties keep the (pricing, offer, option) order
    c_sorted = c[order]
    # on the front: strictly cheaper than everything at least as fast
    cheapest_before = np.minimum.accumulate(np.concatenate(([np.inf], c_sorted[:-1])))
    on_front = order[c_sorted < cheapest_before - 1e-9]
    front = [(int(p_idx[o]), int(m_idx[o]), int(l_idx[o])) for o in on_front]
    if len(front) > MAX_PARETO:  # keep the ends and an even spread between them
        picks = np.unique(np.linspace(0, len(front) - 1, MAX_PARETO).round().astype(int))
        front = [front[k] for k in picks]
    plans = _build_plans(ctx, grid, peak, front, MAX_PARETO)
    return [_renumber(p, k + 1) for k, p in enumerate(plans)]


def _cheapest_per_group(ctx: Context, grid: Grid, ok: npt.NDArray[np.bool_]) -> np.ndarray:
    """(pricing, offer) rows that can reach the Pareto front: per pricing, configuration and
    interruption band (which fix the hours of every option), only the cheapest offer."""
    band = ctx.offers.interruption_band.astype(np.int64) + 1
    rows = []
    for p, pricing in enumerate(grid.pricings):
        price = grid.price_node[p]
        usable = np.flatnonzero(ok[p].any(axis=1) & np.isfinite(price))
        if usable.size == 0:
            continue
        group = ctx.config_of[usable].astype(np.int64) * 8
        if pricing == "spot":
            group = group + band[usable]
        order = usable[np.lexsort((usable, price[usable], group))]
        sorted_group = (ctx.config_of[order].astype(np.int64) * 8) + (
            band[order] if pricing == "spot" else 0
        )
        first = np.concatenate(([True], sorted_group[1:] != sorted_group[:-1]))
        rows.append(np.stack([np.full(int(first.sum()), p), order[first]], axis=1))
    return np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.int64)


def _renumber(plan: Plan, rank: int) -> Plan:
    from dataclasses import replace

    return replace(plan, rank=rank)


def _make_plan(
    ctx: Context,
    grid: Grid,
    peak: npt.NDArray[np.float64],
    cell: tuple[int, int, int],
    *,
    rank: int,
    first: Plan | None,
) -> Plan:
    p, i, opt = cell
    offers = ctx.offers
    sizing = ctx.sizings[int(ctx.config_of[i])]
    nodes = int(grid.nodes[i, opt])
    gpus = int(offers.gpu_count[i]) * nodes
    has_workload = ctx.task.workload is not None
    hours, cost = grid.ranges(p, i, opt) if has_workload else (None, None)
    gpu_hours = Range(hours.low * gpus, hours.expected * gpus, hours.high * gpus) if hours else None
    band = int(offers.interruption_band[i])
    zone = str(offers.zone[i]) or None
    plan = Plan(
        rank=rank,
        provider=str(offers.provider[i]),
        region=str(offers.region[i]),
        zone=zone if grid.pricings[p] == "spot" else None,
        instance_type=str(offers.instance_type[i]),
        accelerator=str(offers.accelerator[i]),
        part=str(offers.part[i]),
        gpus_per_node=int(offers.gpu_count[i]),
        num_nodes=nodes,
        pricing=grid.pricings[p],
        price_per_hour=float(grid.plan_price[p, i, opt]),
        est_hours=hours,
        est_cost=cost,
        gpu_hours=gpu_hours,
        launchable=str(offers.provider[i]) in ctx.launchable,
        reasons=(),
        gpu_memory_gb=float(offers.gpu_memory_gb[i]),
        peak_tflops=float(peak[i, opt]),
        interruption_band=band if band >= 0 else None,
        sharding=sizing.sharding[opt] if opt < len(sizing.sharding) else None,
        as_of=str(offers.as_of[i]),
        source=str(offers.source[i]),
    )
    from dataclasses import replace

    on_demand = float(offers.price_on_demand[i])
    notes = sizing.notes[opt] if opt < len(sizing.notes) else ()
    return replace(
        plan,
        reasons=plan_reasons(
            ctx.task, ctx.objective, plan, first, on_demand_node_price=on_demand, sizing_notes=notes
        ),
    )
