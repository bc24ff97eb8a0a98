"""The synthetic catalog for benchmarks: deterministic, valid against the specs, and fast."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpulease.catalog import Catalog
from gpulease.catalog.types import COLUMNS


def _same(a: Catalog, b: Catalog) -> bool:
    for name in COLUMNS:
        x, y = getattr(a.offers, name), getattr(b.offers, name)
        equal = (
            np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f" else np.array_equal(x, y)
        )
        if not equal:
            return False
    return True


def test_same_seed_same_catalog_other_seed_another() -> None:
    one, two = Catalog.synthetic(2000, seed=7), Catalog.synthetic(2000, seed=7)
    assert _same(one, two)
    assert not _same(one, Catalog.synthetic(2000, seed=8))
    assert one.source == "synthetic(n=2000, seed=7)"


def test_synthetic_offers_are_valid() -> None:
    catalog = Catalog.synthetic(5000, seed=1)
    bundled = Catalog.load(bundled_only=True)
    o = catalog.offers
    assert len(o) == 5000
    assert set(o.part.tolist()) <= set(catalog.accelerators)
    both = ~np.isnan(o.price_on_demand) & ~np.isnan(o.price_spot)
    assert np.all(o.price_spot[both] < o.price_on_demand[both])
    assert np.all(np.isnan(o.price_on_demand) | (o.price_on_demand > 0))
    assert np.count_nonzero(~np.isnan(o.price_spot)) > np.count_nonzero(
        ~np.isnan(bundled.offers.price_spot)
    ) * len(o) / len(bundled.offers)  # spot prices were added
    for provider in set(o.provider.tolist()):  # regions stay the provider's real ones
        real = set(bundled.offers.region[bundled.offers.provider == provider].tolist())
        assert set(o.region[o.provider == provider].tolist()) <= real
    assert set(o.provider.tolist()) == set(bundled.providers)
    assert np.all(o.interruption_band[o.provider != "aws"] == -1)
    assert len(catalog.query("H100", spot=True)) > 0


def test_fifty_thousand_offers_build_quickly() -> None:
    start = time.perf_counter()
    catalog = Catalog.synthetic(50_000, seed=0)
    assert time.perf_counter() - start < 2.0
    assert len(catalog.offers) == 50_000
    assert len(catalog.countries()) == 50_000


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        Catalog.synthetic(-1)
    assert len(Catalog.synthetic(0).offers) == 0
