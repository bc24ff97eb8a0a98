"""Ranking and explaining: why offers without a feasible option fail, the top N for the objective,
the cost/time Pareto front, and each plan's reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from gpulease.catalog import Catalog
from gpulease.catalog.types import OfferTable
from gpulease.optimizer.candidates import BUDGET, DEADLINE, FITS, PRICE_CAP, PricingGrid
from gpulease.optimizer.constraints import candidate_mask, describe_candidate, region_of_zone
from gpulease.optimizer.explain import plan_reasons
from gpulease.optimizer.funnel import Funnel, examples
from gpulease.optimizer.plan import Objective, Plan, Range
from gpulease.optimizer.serving import serving_of
from gpulease.optimizer.sizing import ConfigSizing
from gpulease.spec.models import AcceleratorRequest, Task

MAX_PARETO = 25
SHORTLIST = 16  # × top: rows sorted before the (rarely needed) rest
Cell = tuple[int, int, int]  # (pricing, offer, option)
F = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


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
    run_hours: float | None = None  # the user's run time, for a task without a workload
    keep: Mask = field(default_factory=lambda: np.zeros(0, dtype=bool))
    peak_node: F = field(default_factory=lambda: np.zeros(0))  # dense TFLOPS per node

    @property
    def has_hours(self) -> bool:
        """Whether plans have hours: estimated from a workload, or the run time given."""
        return self.task.workload is not None or self.run_hours is not None


def node_peaks(ctx: Context) -> F:
    """Dense peak TFLOPS of one node of every offer at the workload's precision."""
    precision = ctx.task.workload.precision if ctx.task.workload else "bf16"
    parts, inverse = ctx.catalog.offers.codes("part")
    per_part = np.array(
        [ctx.catalog.spec_for(str(part)).peak_tflops(precision) for part in parts], dtype=float
    )
    peak: F = per_part[inverse[ctx.index]] * ctx.offers.gpu_count
    return peak


def _reject(funnel: Funnel, ctx: Context, bad: Mask, reason: str) -> None:
    passing = np.ones(funnel.alive.shape[0], dtype=bool)
    passing[ctx.index[bad]] = False
    funnel.apply(passing, reason)


def explain(funnel: Funnel, ctx: Context, grids: list[PricingGrid]) -> None:
    """Reject offers with no feasible option, one line per (constraint, accelerator) group."""
    infeasible = _explain_sizing(funnel, ctx)
    m = len(ctx.offers)
    stage = np.zeros(m, dtype=np.int64)
    for grid in grids:
        stage = np.maximum(stage, grid.stage)
    lines: list[tuple[int, Callable[[Mask], str]]] = [
        (
            FITS,
            lambda bad: (
                "spot: interruptions too frequent at these node counts to finish "
                f"({examples(ctx.offers.instance_type[bad])})"
            ),
        ),
        (
            DEADLINE,
            lambda bad: (
                f"too slow for the {ctx.task.deadline_hours:g} h deadline: "
                + _best_by_part(ctx, _per_offer(ctx, grids, _group_best_hours), bad, "{:.1f} h")
            ),
        ),
        (
            BUDGET,
            lambda bad: (
                f"over the ${ctx.task.budget_usd:,.0f} budget: "
                + _best_by_part(ctx, _per_offer(ctx, grids, _offer_best_cost), bad, "${:,.0f}")
            ),
        ),
        (
            PRICE_CAP,
            lambda bad: (
                "above max_price_per_hour "
                f"${ctx.task.resources.max_price_per_hour or 0:g}/h: "
                + _best_by_part(ctx, _per_offer(ctx, grids, _offer_best_price), bad, "${:.2f}/h")
            ),
        ),
    ]
    for needed, reason in lines:
        bad = ~infeasible & (stage == needed - 1)
        if bad.any():
            _reject(funnel, ctx, bad, reason(bad))
    ctx.keep = stage == PRICE_CAP


def _explain_sizing(funnel: Funnel, ctx: Context) -> Mask:
    """Reject offers whose configuration cannot run the workload at all; return them."""
    m = len(ctx.offers)
    reasons = [sizing.infeasible or "" for sizing in ctx.sizings]
    templates = sorted(set(reasons) - {""})
    code = {template: k for k, template in enumerate(templates)}
    config_code = np.array([code.get(r, -1) for r in reasons], dtype=np.int64)
    offer_code = config_code[ctx.config_of] if m else np.zeros(0, np.int64)
    for k, template in enumerate(templates):
        bad = offer_code == k
        counts = sorted({int(c) for c in ctx.offers.gpu_count[bad].tolist()})
        gpus = ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "")
        _reject(funnel, ctx, bad, template.replace("{gpus}", gpus + str(counts[-1])))
    infeasible: Mask = offer_code >= 0
    return infeasible


def _group_best_hours(ctx: Context, grid: PricingGrid) -> F:
    """Per offer, the fewest expected hours any option of its group reaches."""
    fastest = np.min(np.where(np.isfinite(grid.hours), grid.hours, np.inf), axis=1)
    best: F = fastest[grid.group]
    return best


def _in_time(ctx: Context, grid: PricingGrid) -> Mask:
    """(G, L) options that fit and meet the deadline."""
    ok: Mask = np.isfinite(grid.nodes) & np.isfinite(grid.hours)
    if ctx.task.deadline_hours:
        with np.errstate(invalid="ignore"):
            ok &= grid.hours <= ctx.task.deadline_hours
    return ok


def _offer_best_cost(ctx: Context, grid: PricingGrid) -> F:
    """Per offer, the least expected cost of an option that meets the deadline."""
    least = np.min(np.where(_in_time(ctx, grid), grid.unit_cost(), np.inf), axis=1)
    best: F = grid.price * least[grid.group]
    return best


def _offer_best_price(ctx: Context, grid: PricingGrid) -> F:
    """Per offer, the least hourly price of an option that meets the deadline."""
    least = np.min(np.where(_in_time(ctx, grid), grid.nodes, np.inf), axis=1)
    best: F = grid.price * least[grid.group]
    return best


def _per_offer(
    ctx: Context, grids: list[PricingGrid], figure: Callable[[Context, PricingGrid], F]
) -> F:
    """The best of ``figure`` over the pricing models, per offer."""
    best: F = np.min(np.stack([figure(ctx, g) for g in grids]), axis=0)
    return best


def _best_by_part(ctx: Context, best_offer: F, bad: Mask, fmt: str) -> str:
    """``A100 (best 31 h), T4 (best 80 h)`` over the offers in ``bad``."""
    chosen = bad & np.isfinite(best_offer)
    parts, inverse = ctx.catalog.offers.codes("part")
    per_part = np.full(len(parts), np.inf)
    np.minimum.at(per_part, inverse[ctx.index][chosen], best_offer[chosen])
    ordered = sorted((float(v), str(parts[k])) for k, v in enumerate(per_part) if np.isfinite(v))
    shown = ", ".join(f"{part} (best {fmt.format(v)})" for v, part in ordered[:5])
    return shown + (f", … (+{len(ordered) - 5})" if len(ordered) > 5 else "")


def _option(name: str, count: int | None) -> str:
    return name if count is None else f"{name}:{count}"


def preference_filter(funnel: Funnel, ctx: Context) -> None:
    """With an ordered accelerator list, keep only the first option (or, where the task lists
    candidates, the first candidate) that has a plan."""
    request = ctx.task.resources.accelerators
    if request is None or not request.ordered or not ctx.keep.any():
        return
    for mask, label in _preferences(ctx, request):
        has = ctx.keep & mask
        if has.any():
            later = ctx.keep & ~has
            if later.any():
                _reject(
                    funnel,
                    ctx,
                    later,
                    f"lower in the preference order than {label}, which has "
                    f"feasible plans ({examples(ctx.offers.accelerator[later])})",
                )
            ctx.keep = has
            return


def _preferences(ctx: Context, request: AcceleratorRequest) -> Iterator[tuple[Mask, str]]:
    offers, candidates = ctx.offers, ctx.task.resources.candidates
    if candidates:
        workload = ctx.task.workload is not None
        for candidate in candidates:
            yield (
                candidate_mask(offers, candidate, has_workload=workload),
                describe_candidate(candidate),
            )
        return
    for name, count in request.options:
        has = offers.accelerator == name
        if count is not None:
            has &= offers.gpu_count == count
        yield has, _option(name, count)


def rank(ctx: Context, grids: list[PricingGrid], top: int) -> tuple[list[Plan], list[Plan]]:
    """The top ``top`` plans for the objective and the cost/time Pareto front."""
    if not ctx.keep.any():
        return [], []
    columns: list[tuple[npt.NDArray[np.int64], ...]] = []
    keys: list[tuple[F, F, F]] = []
    for p, grid in enumerate(grids):
        i = np.flatnonzero(ctx.keep & (grid.option >= 0))
        opt = grid.option[i]
        columns.append((np.full(i.size, p), i, opt))
        keys.append(_scores(ctx, grid, i, opt))
    p_idx, m_idx, l_idx = (np.concatenate(c) for c in zip(*columns, strict=True))
    price, secondary, primary = (np.concatenate(k) for k in zip(*keys, strict=True))
    cells = (
        (int(p_idx[o]), int(m_idx[o]), int(l_idx[o]))
        for o in _ordered((price, secondary, primary), top * SHORTLIST)
    )
    plans = _build_plans(ctx, grids, cells, top)
    return plans, _pareto(ctx, grids)


def _scores(
    ctx: Context, grid: PricingGrid, i: npt.NDArray[np.int64], opt: npt.NDArray[np.int64]
) -> tuple[F, F, F]:
    """(plan price, secondary, primary) of offers ``i`` at options ``opt``; lower is better."""
    g = grid.group[i]
    nodes = grid.nodes[g, opt]
    plan_price = grid.price[i] * nodes
    peak = ctx.peak_node[i] * nodes
    if ctx.has_hours:
        hours = grid.hours[g, opt]
        cost = plan_price * hours
    else:
        hours, cost = -peak, plan_price  # no estimate: more TFLOPS stands in for speed
    if ctx.objective == "fastest":
        return plan_price, cost, hours
    if ctx.objective == "price-per-tflop":
        return plan_price, cost, plan_price / np.maximum(peak, 1e-9)
    return plan_price, hours, cost


def _ordered(keys: tuple[F, ...], shortlist: int) -> Iterator[int]:
    """Indices sorted by ``keys`` (last key primary; stable). Sorts a shortlist of the best
    ``shortlist`` first, and everything else only if the caller reads past it."""
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


def _pareto(ctx: Context, grids: list[PricingGrid]) -> list[Plan]:
    """Non-dominated (expected cost, expected hours) plans, thinned to :data:`MAX_PARETO`.

    Within a group every option's hours are the same for all offers, so only the group's
    cheapest kept offer can reach the front; its options are the candidates."""
    cells: list[Cell] = []
    cost: list[float] = []
    time: list[float] = []
    for p, grid in enumerate(grids):
        for i in _cheapest_per_group(ctx, grid):
            g = int(grid.group[i])
            limits_ok = _options_ok(ctx, grid, i)
            for opt in np.flatnonzero(limits_ok):
                nodes = float(grid.nodes[g, opt])
                hours = (
                    float(grid.hours[g, opt])
                    if ctx.has_hours
                    else 1 / max(float(ctx.peak_node[i]) * nodes, 1e-9)
                )
                cells.append((p, int(i), int(opt)))
                cost.append(float(grid.price[i]) * nodes * (hours if ctx.has_hours else 1.0))
                time.append(hours)
    if not cells:
        return []
    c, t = np.array(cost), np.array(time)
    order = np.lexsort((c, t))  # stable: ties keep the (pricing, offer, option) order
    c_sorted = c[order]
    cheapest_before = np.minimum.accumulate(np.concatenate(([np.inf], c_sorted[:-1])))
    front = [cells[o] for o in order[c_sorted < cheapest_before - 1e-9]]
    if len(front) > MAX_PARETO:  # keep the ends and an even spread between them
        picks = sorted(set(np.linspace(0, len(front) - 1, MAX_PARETO).round().astype(int).tolist()))
        front = [front[k] for k in picks]
    plans = _build_plans(ctx, grids, front, MAX_PARETO)
    return [replace(p, rank=k + 1) for k, p in enumerate(plans)]


def _options_ok(ctx: Context, grid: PricingGrid, i: int) -> Mask:
    """The options of offer ``i`` that pass every constraint."""
    g = int(grid.group[i])
    nodes, hours = grid.nodes[g], grid.hours[g]
    price = float(grid.price[i])
    ok: Mask = np.isfinite(nodes)
    task = ctx.task
    if ctx.has_hours:
        ok &= np.isfinite(hours)
        with np.errstate(invalid="ignore"):
            if task.deadline_hours:
                ok &= hours <= task.deadline_hours
            if task.budget_usd:
                ok &= price * nodes * hours <= task.budget_usd
    if task.resources.max_price_per_hour:
        with np.errstate(invalid="ignore"):
            ok &= price * nodes <= task.resources.max_price_per_hour
    return ok


def _cheapest_per_group(ctx: Context, grid: PricingGrid) -> list[int]:
    usable = np.flatnonzero(ctx.keep & (grid.option >= 0))
    if usable.size == 0:
        return []
    # one stable sort on (group, price): prices are below $1M/h, so group × 1e7 + price is exact
    key = grid.group[usable] * 1e7 + grid.price[usable]
    order = usable[np.argsort(key, kind="stable")]
    groups = grid.group[order]
    first = np.concatenate(([True], groups[1:] != groups[:-1]))
    picked: list[int] = order[first].tolist()
    return picked


def _plan_zone(ctx: Context, grid: PricingGrid, i: int) -> str | None:
    """The zone a plan names: a spot offer's own zone (spot prices are per zone); where the task
    asks for zones, the asked zone (an offer listed per region or by zone id takes the asked
    zone of its region)."""
    zone = str(ctx.offers.zone[i])
    asked = ctx.task.resources.zones
    if asked:
        if zone in asked:
            return zone
        region = str(ctx.offers.region[i])
        return next((z for z in asked if region_of_zone(z) == region), None)
    return (zone or None) if grid.pricing == "spot" else None


def _dedupe_key(ctx: Context, grids: list[PricingGrid], cell: Cell) -> tuple[object, ...]:
    p, i, opt = cell
    grid = grids[p]
    zone = _plan_zone(ctx, grid, i) or ""
    return (
        str(ctx.offers.provider[i]),
        str(ctx.offers.region[i]),
        zone,
        str(ctx.offers.instance_type[i]),
        grid.pricing,
        float(grid.nodes[grid.group[i], opt]),
    )


def _build_plans(
    ctx: Context, grids: list[PricingGrid], cells: Iterable[Cell], limit: int
) -> list[Plan]:
    plans: list[Plan] = []
    seen: set[tuple[object, ...]] = set()
    for cell in cells:
        key = _dedupe_key(ctx, grids, cell)
        if key in seen:
            continue
        seen.add(key)
        first = plans[0] if plans else None
        plans.append(_make_plan(ctx, grids[cell[0]], cell, rank=len(plans) + 1, first=first))
        if len(plans) >= limit:
            break
    return plans


def _stated(value: float) -> float | None:
    """A host figure as a plan states it: None where the offer does not say (NaN)."""
    number = float(value)
    return number if np.isfinite(number) else None


def _make_plan(
    ctx: Context, grid: PricingGrid, cell: Cell, *, rank: int, first: Plan | None
) -> Plan:
    _, i, opt = cell
    offers = ctx.offers
    sizing = ctx.sizings[int(ctx.config_of[i])]
    nodes = int(grid.nodes[grid.group[i], opt])
    gpus = int(offers.gpu_count[i]) * nodes
    hours, cost = grid.ranges(i, opt) if ctx.has_hours else (None, None)
    gpu_hours = Range(hours.low * gpus, hours.expected * gpus, hours.high * gpus) if hours else None
    band = int(offers.interruption_band[i])
    plan = Plan(
        rank=rank,
        provider=str(offers.provider[i]),
        region=str(offers.region[i]),
        zone=_plan_zone(ctx, grid, i),
        instance_type=str(offers.instance_type[i]),
        accelerator=str(offers.accelerator[i]),
        part=str(offers.part[i]),
        gpus_per_node=int(offers.gpu_count[i]),
        num_nodes=nodes,
        pricing=grid.pricing,
        price_per_hour=float(grid.price[i]) * nodes,
        est_hours=hours,
        est_cost=cost,
        gpu_hours=gpu_hours,
        launchable=str(offers.provider[i]) in ctx.launchable,
        reasons=(),
        gpu_memory_gb=float(offers.gpu_memory_gb[i]),
        peak_tflops=float(ctx.peak_node[i]) * nodes,
        interruption_band=band if band >= 0 else None,
        sharding=sizing.sharding[opt] if opt < len(sizing.sharding) else None,
        as_of=str(offers.as_of[i]),
        source=str(offers.source[i]),
        cpu_arch=str(offers.cpu_arch[i]),
        vcpus=_stated(offers.vcpus[i]),
        ram_gb=_stated(offers.ram_gb[i]),
        serving=serving_of(sizing, opt, cost),
    )
    notes = sizing.notes[opt] if opt < len(sizing.notes) else ()
    reasons = plan_reasons(
        ctx.task,
        ctx.objective,
        plan,
        first,
        on_demand_node_price=float(offers.price_on_demand[i]),
        sizing_notes=notes,
    )
    return replace(plan, reasons=reasons)
