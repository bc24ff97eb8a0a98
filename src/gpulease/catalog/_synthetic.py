"""A deterministic synthetic offer table for benchmarks (e.g. the 50,000-offer optimizer run).

Offers are sampled with replacement from a real table (the bundled snapshot) and perturbed so the
optimizer sees realistic variety: the region is redrawn among the provider's real regions, prices
are scaled by a log-normal factor (σ 0.15), a third of offers without a spot price get one at
30-70 % of on-demand, existing spot prices move by ±20 % (kept below on-demand), AWS spot offers get
an interruption band 0..4. Instance types, parts, GPU counts, memory and hardware stay those of the
sampled offer, so every offer is still valid against the specs. Same ``(base, n, seed)`` → same
table.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpulease.catalog.types import OfferTable


def _redraw_regions(
    base: OfferTable, index: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.str_]:
    regions: npt.NDArray[np.str_] = base.region[index].copy()
    providers = base.provider[index]
    for provider in np.unique(providers):
        pool = np.unique(base.region[base.provider == provider])
        rows = np.flatnonzero(providers == provider)
        regions[rows] = pool[rng.integers(0, pool.size, rows.size)]
    return regions


def synthetic_table(base: OfferTable, n_offers: int, seed: int) -> OfferTable:
    """``n_offers`` offers derived from ``base`` (see the module docstring)."""
    if n_offers < 0:
        raise ValueError("n_offers must not be negative")
    if len(base) == 0:
        raise ValueError("cannot sample offers from an empty table")
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(base), n_offers)
    table = base.take(index)
    regions = _redraw_regions(base, index, rng)
    moved = regions != table.region
    table.region = regions
    table.zone = np.where(moved, "", table.zone)
    scale = rng.lognormal(0.0, 0.15, n_offers)
    on_demand = np.round(table.price_on_demand * scale, 4)
    spot = table.price_spot * scale * rng.uniform(0.8, 1.2, n_offers)
    add = np.isnan(spot) & (rng.random(n_offers) < 1 / 3)
    spot = np.where(add, on_demand * rng.uniform(0.3, 0.7, n_offers), spot)
    spot = np.where(spot >= on_demand, on_demand * 0.95, spot)
    table.price_on_demand = on_demand
    table.price_spot = np.round(spot, 4)
    aws_spot = (table.provider == "aws") & ~np.isnan(table.price_spot)
    table.interruption_band = np.where(aws_spot, rng.integers(0, 5, n_offers), -1)
    table.source = np.full(n_offers, f"synthetic(seed={seed})", dtype=np.str_)
    return table
