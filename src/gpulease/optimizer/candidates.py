"""Candidates: for each pricing model, the offers grouped by what fixes their hours, the node-count
options of each group, and the option each offer takes.

Hours depend on the hardware configuration (part × GPUs per node × fabric × network), the node
count and — on spot — the interruption band; they do not depend on the offer's price. So hours are
held per *group* (configuration, and band for spot) × option: a few thousand numbers even for
50,000 offers. Per offer only the price varies, and the budget and the hourly cap become price
thresholds on the group's figures (``cost = price × nodes × hours ≤ budget`` ⇔
``nodes × hours ≤ budget / price``). Each offer then takes the first option, in the objective's
order, that passes every constraint; :attr:`PricingGrid.stage` records how far the best option got
(1 fits, 2 meets the deadline, 3 within budget, 4 under the hourly cap) for the explanations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpulease.optimizer import spot_overhead
from gpulease.optimizer.plan import Objective, Pricing, Range

F = npt.NDArray[np.float64]
I = npt.NDArray[np.int64]  # noqa: E741 - a type alias, not a variable
MAX_STRETCH = 10.0  # 1 / (1 - 0.9): the stretch at the highest load a spot plan may carry
FITS, DEADLINE, BUDGET, PRICE_CAP = 1, 2, 3, 4


@dataclass(slots=True)
class Limits:
    deadline_h: float | None
    budget_usd: float | None
    max_price_per_hour: float | None
    has_hours: bool


@dataclass(slots=True)
class PricingGrid:
    """One pricing model over the offers that passed the hard constraints."""

    pricing: Pricing
    price: F  # (m,) $/h per node; NaN when not offered
    group: I  # (m,) group of each offer
    nodes: F  # (G, L) node count of each option; NaN where none
    hours: F  # (G, L) expected hours (spot restarts included); NaN without a workload
    base: F  # (G, L, 3) low / expected / high hours before spot restarts
    band: I  # (G,) interruption band of the group (spot), else -1
    loss_h: float
    option: I  # (m,) the option each offer takes, -1 when none passes
    stage: I  # (m,) how far the offer's best option got (0 … PRICE_CAP)

    def unit_cost(self) -> F:
        """(G, L) cost per $/h of node price: nodes × hours (nodes alone without a workload)."""
        return self.nodes * np.where(np.isfinite(self.hours), self.hours, 1.0)

    def ranges(self, i: int, opt: int) -> tuple[Range, Range]:
        """(hours, cost) low / expected / high of offer ``i`` at option ``opt``."""
        g = int(self.group[i])
        hours = self.base[g, opt].copy()
        if self.pricing == "spot":
            rates = spot_overhead.hourly_rates(self.band[g : g + 1])[0]
            stretch = spot_overhead.stretch_factor(
                rates, np.full(3, self.nodes[g, opt]), self.loss_h
            )
            hours = hours * np.nan_to_num(stretch, nan=MAX_STRETCH)  # high rate: cap the range
        price = float(self.price[i] * self.nodes[g, opt])
        low, expected, high = (float(h) for h in hours)
        return Range(low, expected, high), Range(low * price, expected * price, high * price)


def build_pricing_grid(
    pricing: Pricing,
    price: F,
    *,
    config_of: I,
    band: I,
    nodes_k: F,
    hours_k: F,
    loss_h: float,
    limits: Limits,
    objective: Objective,
) -> PricingGrid:
    """Group the offers, price every group's options and choose each offer's option."""
    spot = pricing == "spot"
    if spot:  # a group per configuration and band
        _, first, group = np.unique(
            config_of * 8 + band + 1, return_index=True, return_inverse=True
        )
        g_config, g_band = config_of[first], band[first]
    else:  # a group per configuration
        group = config_of
        g_config = np.arange(nodes_k.shape[0])
        g_band = np.full(nodes_k.shape[0], -1, dtype=np.int64)
    nodes = nodes_k[g_config]
    base = hours_k[g_config]
    hours = base[..., 1].copy()
    if spot and limits.has_hours:
        rate = spot_overhead.hourly_rates(g_band)[:, 1:2]
        hours = hours * spot_overhead.stretch_factor(rate, nodes, loss_h)
    grid = PricingGrid(
        pricing,
        price,
        group.astype(np.int64),
        nodes,
        hours,
        base,
        g_band,
        loss_h,
        np.full(price.shape[0], -1, dtype=np.int64),
        np.zeros(price.shape[0], dtype=np.int64),
    )
    _choose(grid, limits, objective)
    return grid


def _option_order(grid: PricingGrid, objective: Objective, fits: npt.NDArray[np.bool_]) -> I:
    """(G, L) options of each group in the objective's order (the price is common to all);
    options that do not fit come last."""
    unit = np.where(fits, grid.unit_cost(), np.nan)
    hours = np.where(fits, np.where(np.isfinite(grid.hours), grid.hours, grid.nodes), np.nan)
    if objective == "fastest":
        order: I = np.lexsort((unit, hours))
    else:  # cheapest, and price-per-tflop (equal for every option of an offer): by cost
        order = np.lexsort((hours, unit))
    return order


def _choose(grid: PricingGrid, limits: Limits, objective: Objective) -> None:
    m = grid.price.shape[0]
    if m == 0 or grid.nodes.shape[1] == 0:
        return
    fits = np.isfinite(grid.nodes)
    if limits.has_hours:
        fits &= np.isfinite(grid.hours)
    in_time = fits
    if limits.deadline_h and limits.has_hours:
        with np.errstate(invalid="ignore"):
            in_time = fits & (grid.hours <= limits.deadline_h)
    unit = grid.unit_cost()
    with np.errstate(divide="ignore"):
        budget_unit = (
            limits.budget_usd / grid.price
            if limits.budget_usd and limits.has_hours
            else np.full(m, np.inf)
        )
        cap_nodes = (
            limits.max_price_per_hour / grid.price
            if limits.max_price_per_hour
            else np.full(m, np.inf)
        )
    order = _option_order(grid, objective, fits)
    groups = np.arange(order.shape[0])
    g = grid.group
    priced = np.isfinite(grid.price)
    for step in range(order.shape[1]):
        opt = order[:, step]  # per group: its option at this step
        fit_g = fits[groups, opt]
        if not fit_g.any():
            break  # options are ordered with the missing ones last
        time_g, unit_g, nodes_g = in_time[groups, opt], unit[groups, opt], grid.nodes[groups, opt]
        ok_fit = fit_g[g]
        ok_time = time_g[g]
        ok_budget = ok_time & (unit_g[g] <= budget_unit)
        ok_all = ok_budget & (nodes_g[g] <= cap_nodes)
        reached = ok_fit.astype(np.int64) + ok_time + ok_budget + ok_all
        np.maximum(grid.stage, reached, out=grid.stage)
        grid.option = np.where(ok_all & (grid.option < 0), opt[g], grid.option)
    grid.stage = np.where(priced, grid.stage, 0)
    grid.option = np.where(priced, grid.option, -1)
