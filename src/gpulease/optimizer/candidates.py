"""The candidate grid: every surviving offer × pricing model × node-count option, as arrays.

Shapes: ``P`` pricing models × ``m`` offers × ``L`` node-count options, expected values only; the
low / high ranges are computed for the few cells that become plans (:meth:`Grid.ranges`).
Infeasible cells are NaN; the ``*_ok`` masks say which constraint a cell fails, in the order the
explanation uses (fits memory → meets deadline → within budget → within the hourly price cap).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpulease.optimizer import spot_overhead
from gpulease.optimizer.plan import Pricing, Range

MAX_STRETCH = 10.0  # 1 / (1 - 0.9): the stretch at the highest load a spot plan may carry
F = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]


@dataclass(slots=True)
class Grid:
    pricings: tuple[Pricing, ...]
    price_node: F  # (P, m) $/h per node; NaN when not offered
    nodes: F  # (m, L)
    base_hours: F  # (m, L, 3) low/expected/high before spot restarts; NaN without a workload
    band: npt.NDArray[np.int64]  # (m,) interruption band
    loss_h: float  # hours lost per interruption
    hours: F  # (P, m, L) expected, with spot restarts
    cost: F  # (P, m, L) expected
    plan_price: F  # (P, m, L) $/h for the whole plan
    fits: B  # (P, m, L) an option exists and is priced
    deadline_ok: B
    budget_ok: B
    price_ok: B

    @property
    def feasible(self) -> B:
        return self.fits & self.deadline_ok & self.budget_ok & self.price_ok

    def ranges(self, p: int, i: int, opt: int) -> tuple[Range, Range]:
        """(hours, cost) low / expected / high of one cell; spot uses the band's bounds."""
        hours = self.base_hours[i, opt].copy()
        if self.pricings[p] == "spot":
            rates = spot_overhead.hourly_rates(self.band[i : i + 1])[0]
            nodes = np.full(3, self.nodes[i, opt])
            stretch = spot_overhead.stretch_factor(rates, nodes, self.loss_h)
            hours = hours * np.nan_to_num(stretch, nan=MAX_STRETCH)  # high rate: cap the range
        price = float(self.plan_price[p, i, opt])
        low, expected, high = (float(h) for h in hours)
        return Range(low, expected, high), Range(low * price, expected * price, high * price)


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
    expected = hours[..., 1]
    hours_p = np.empty((len(pricings), *expected.shape))
    for k, pricing in enumerate(pricings):
        if pricing == "spot" and has_workload:
            rate = spot_overhead.hourly_rates(band)[:, 1:2]  # (m, 1) expected rate
            hours_p[k] = expected * spot_overhead.stretch_factor(rate, nodes, loss)
        else:
            hours_p[k] = expected
    plan_price = price_node[:, :, None] * nodes[None, :, :]  # (P, m, L)
    cost = plan_price * hours_p
    priced = np.isfinite(plan_price)
    fits = priced & np.isfinite(hours_p) if has_workload else priced
    everywhere = np.ones_like(fits)
    with np.errstate(invalid="ignore"):
        deadline_ok = hours_p <= deadline_h if (deadline_h and has_workload) else everywhere
        budget_ok = cost <= budget_usd if (budget_usd and has_workload) else everywhere
        price_ok = plan_price <= max_price_per_hour if max_price_per_hour else everywhere
    return Grid(
        pricings,
        price_node,
        nodes,
        hours,
        band,
        loss,
        hours_p,
        cost,
        plan_price,
        fits,
        deadline_ok,
        budget_ok,
        price_ok,
    )
