"""The candidate grid: every surviving offer × pricing model × node-count option, as arrays.

Shapes: ``P`` pricing models × ``m`` offers × ``L`` node-count options. Hours and costs carry a last
axis of 3 (low, expected, high). Infeasible cells are NaN; the ``*_ok`` masks say which constraint
a cell fails, in the order the explanation uses (fits memory → meets deadline → within budget →
within the hourly price cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpulease.optimizer import spot_overhead
from gpulease.optimizer.plan import Pricing

F = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(slots=True)
class Grid:
    pricings: tuple[Pricing, ...]
    price_node: F  # (P, m) $/h per node; NaN when not offered
    nodes: F  # (m, L)
    hours: F  # (P, m, L, 3); NaN without a workload
    cost: F  # (P, m, L, 3)
    plan_price: F  # (P, m, L) $/h for the whole plan
    fits: B  # (P, m, L) an option exists and is priced
    deadline_ok: B
    budget_ok: B
    price_ok: B

    @property
    def feasible(self) -> B:
        return self.fits & self.deadline_ok & self.budget_ok & self.price_ok


def build_grid(
    *,
    pricings: tuple[Pricing, ...],
    prices: dict[Pricing, F],
    band: npt.NDArray[np.int64],
    nodes: F,
    hours: F,
    has_workload: bool,
    deadline_h: float | None,
    budget_usd: float | None,
    max_price_per_hour: float | None,
    checkpoint_interval_h: float | None,
) -> Grid:
    price_node = np.stack([prices[p] for p in pricings])  # (P, m)
    loss = spot_overhead.loss_per_interruption(checkpoint_interval_h)
    rates = spot_overhead.hourly_rates(band)  # (m, 3)
    hours_p = np.empty((len(pricings), *hours.shape))
    for k, pricing in enumerate(pricings):
        if pricing == "spot" and has_workload:
            # low hours with the low rate, expected with expected, high with the high rate
            stretch = np.stack(
                [spot_overhead.stretch_factor(rates[:, j, None], nodes, loss) for j in range(3)],
                axis=-1,
            )  # (m, L, 3)
            hours_p[k] = hours * stretch
        else:
            hours_p[k] = hours
    plan_price = price_node[:, :, None] * nodes[None, :, :]  # (P, m, L)
    cost = plan_price[..., None] * hours_p
    priced = np.isfinite(plan_price)
    fits = priced & (np.isfinite(hours_p[..., 1]) if has_workload else priced)
    with np.errstate(invalid="ignore"):
        deadline_ok = (
            (hours_p[..., 1] <= deadline_h) if (deadline_h and has_workload) else np.ones_like(fits)
        )
        budget_ok = (
            (cost[..., 1] <= budget_usd) if (budget_usd and has_workload) else np.ones_like(fits)
        )
        price_ok = (plan_price <= max_price_per_hour) if max_price_per_hour else np.ones_like(fits)
    return Grid(
        pricings,
        price_node,
        nodes,
        hours_p,
        cost,
        plan_price,
        fits,
        deadline_ok,
        budget_ok,
        price_ok,
    )
