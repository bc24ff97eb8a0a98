"""Catalog queries used by `gpulease gpus`: filters, ordering, the per-GPU summary, staleness."""

from __future__ import annotations

import math
from datetime import date

import numpy as np
import pytest

from gpulease.catalog import Catalog, GpuSummary, Offer
from gpulease.errors import CatalogError


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(bundled_only=True)


def _per_gpu(offers: list[Offer], spot: bool = False) -> list[float]:
    prices = [(o.price_spot if spot else o.price_on_demand) for o in offers]
    return [math.inf if p is None else p / o.gpu_count for p, o in zip(prices, offers, strict=True)]


def test_query_by_name_part_or_alias(catalog: Catalog) -> None:
    by_name = catalog.query("H100")
    assert by_name and {o.accelerator for o in by_name} == {"H100"}
    assert {o.part for o in by_name} == {"H100-SXM"}  # the NVL board is not an H100
    by_part = catalog.query("h100-nvl")
    assert by_part and {(o.accelerator, o.part) for o in by_part} == {("H100-NVL", "H100-NVL")}
    assert [o.instance_type for o in catalog.query("H100 NVL")] == [
        o.instance_type for o in by_part
    ]
    assert len(catalog.query("a100_80gb")) == len(catalog.query("A100-80GB")) > 0
    assert catalog.query("no-such-gpu") == []


def test_query_is_sorted_by_price_per_gpu_hour(catalog: Catalog) -> None:
    prices = _per_gpu(catalog.query("A100-80GB"))
    assert prices == sorted(prices)
    spot = catalog.query("H100", spot=True)
    assert spot and all(o.price_spot is not None for o in spot)
    assert _per_gpu(spot, spot=True) == sorted(_per_gpu(spot, spot=True))


def test_query_filters_providers_regions_and_gpu_count(catalog: Catalog) -> None:
    aws = catalog.query(providers=["AWS"])
    assert aws and {o.provider for o in aws} == {"aws"}
    eu = catalog.query(regions=["eu-*", "europe-*"])
    assert eu and all(o.region.startswith(("eu-", "europe-")) for o in eu)
    exact = catalog.query(regions=["us-east-1"], providers=["aws", "lambda"])
    assert {o.region for o in exact} == {"us-east-1"} and {o.provider for o in exact} == {
        "aws",
        "lambda",
    }
    big = catalog.query("H100", min_gpus=8)
    assert big and all(o.gpu_count >= 8 for o in big)
    assert catalog.query(providers=[]) == []


def test_offer_objects_have_nones_for_missing_values(catalog: Catalog) -> None:
    vast = catalog.query(providers=["vast"])[0]
    assert vast.price_spot is None and vast.interruption_band is None and vast.zone is None
    assert vast.certifications == ()
    aws = catalog.query("A100", providers=["aws"])
    assert aws[0].certifications == ("hipaa",)


def test_gpu_summary_per_accelerator(catalog: Catalog) -> None:
    summary = {s.accelerator: s for s in catalog.gpu_summary()}
    o = catalog.offers
    assert set(summary) == set(o.accelerator[o.gpu_count > 0].tolist())  # GPUs only
    assert "CPU" in set(o.accelerator.tolist()) and "CPU" not in summary
    h100: GpuSummary = summary["H100"]
    cheapest = min(p for p in _per_gpu(catalog.query("H100")))
    assert h100.on_demand_per_gpu_hour == pytest.approx(cheapest)
    assert h100.on_demand_offer is not None and h100.on_demand_offer.accelerator == "H100"
    assert h100.spot_per_gpu_hour is not None and h100.spot_per_gpu_hour < cheapest
    assert h100.usd_per_bf16_tflop_hour == pytest.approx(cheapest / h100.bf16_tflops)
    assert {"aws", "gcp", "azure", "lambda"} <= set(h100.providers)
    assert h100.offers == len(catalog.query("H100"))
    eu = {s.accelerator: s for s in catalog.gpu_summary(regions=["eu-*"])}
    assert eu and set(eu["A10G"].providers) == {"aws"}


def test_countries_align_with_offers(catalog: Catalog) -> None:
    countries = catalog.countries()
    o = catalog.offers
    i = int(np.flatnonzero((o.provider == "gcp") & (o.region == "europe-west4"))[0])
    assert countries[i] == "NL"


def test_spec_for_an_unknown_part_is_a_catalog_error(catalog: Catalog) -> None:
    with pytest.raises(CatalogError, match="unknown accelerator part 'H900'"):
        catalog.spec_for("H900")


def test_age_days_counts_from_the_newest_as_of(catalog: Catalog) -> None:
    assert catalog.age_days(today=date(2026, 11, 30)) == 0
    assert catalog.age_days(today=date(2027, 1, 29)) == 60
    assert catalog.age_days() == (date.today() - catalog.as_of).days


def test_with_offers_adds_run_time_offers_without_touching_the_original() -> None:
    base = Catalog.load(bundled_only=True)
    extra = base.offers.take(np.array([0, 1]))
    merged = base.with_offers(extra, label="local")
    assert len(merged.offers) == len(base.offers) + 2
    assert merged.source == "bundled+local" and len(base.offers) == len(merged.offers) - 2
    assert base.with_offers(base.offers.take(np.array([], dtype=np.int64)), label="x") is base
