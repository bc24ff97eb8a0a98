"""`commitment: 1y` finds plans: the catalog's reserved columns, and a user's negotiated
discount (config `pricing.discounts`) that prices its provider's offers and says so."""

from __future__ import annotations

import pytest

from gpulease.catalog import Catalog
from gpulease.errors import UserInputError
from gpulease.optimizer import plan_all
from tests.optimizer.conftest import make_task

A100_8 = {"accelerators": {"A100-80GB": 8}, "commitment": "1y"}


def _reserved(result):  # type: ignore[no-untyped-def]
    return [p for p in result.plans if p.pricing == "reserved"]


def test_published_reserved_prices_give_reserved_plans(small_catalog: Catalog) -> None:
    task = make_task(resources={"accelerators": {"A100": 8}, "commitment": "1y"})
    reserved = _reserved(plan_all(task, catalog=small_catalog, config={}, hours=10))
    assert reserved and {p.provider for p in reserved} == {"aws"}
    assert reserved[0].price_per_hour == pytest.approx(13.00)
    assert not any("your negotiated" in r for p in reserved for r in p.reasons)


def test_without_a_source_a_commitment_finds_no_reserved_plan(small_catalog: Catalog) -> None:
    task = make_task(resources=A100_8)
    assert _reserved(plan_all(task, catalog=small_catalog, config={}, hours=10)) == []


def test_a_negotiated_discount_prices_the_providers_offers_and_says_it_is_yours(
    small_catalog: Catalog,
) -> None:
    config = {"pricing": {"discounts": [
        {"provider": "gcp", "commitment": "1y", "discount": 0.30, "note": "MSA 2026"},
        {"provider": "gcp", "commitment": "3y", "discount": "50%"},
    ]}}  # fmt: skip
    task = make_task(resources=A100_8)
    reserved = _reserved(plan_all(task, catalog=small_catalog, config=config, hours=10))
    assert [p.instance_type for p in reserved] == ["a2-ultragpu-8g"]
    assert reserved[0].price_per_hour == pytest.approx(40.00 * 0.70)
    assert reserved[0].est_cost is not None
    assert reserved[0].est_cost.expected == pytest.approx(28.0 * reserved[0].est_hours.expected)  # type: ignore[union-attr]
    said = [r for r in reserved[0].reasons if "your negotiated" in r]
    assert said and "30% off gcp on-demand" in said[0] and "MSA 2026" in said[0]
    assert "1y commitment" in said[0] and "config pricing.discounts" in said[0]
    # the on-demand plan of the same offer is not the user's figure
    others = [p for p in plan_all(task, catalog=small_catalog, config=config, hours=10).plans
              if p.pricing != "reserved"]  # fmt: skip
    assert others and not any("your negotiated" in r for p in others for r in p.reasons)


def test_the_users_discount_overrides_a_published_reserved_price(small_catalog: Catalog) -> None:
    config = {"pricing": {"discounts": [
        {"provider": "aws", "commitment": "1y", "discount": 0.5, "regions": ["us-*"]},
    ]}}  # fmt: skip
    task = make_task(resources={"accelerators": {"A100": 8}, "commitment": "1y"})
    reserved = _reserved(plan_all(task, catalog=small_catalog, config=config, hours=10))
    assert reserved[0].price_per_hour == pytest.approx(21.96 * 0.5)
    assert any("in us-*" in r for r in reserved[0].reasons)


def test_a_bad_discount_is_a_user_error_naming_the_field(small_catalog: Catalog) -> None:
    config = {"pricing": {"discounts": [{"provider": "aws", "commitment": "2y", "discount": 0.3}]}}
    with pytest.raises(UserInputError, match=r"pricing.discounts\[0\].commitment"):
        plan_all(make_task(resources=A100_8), catalog=small_catalog, config=config, hours=10)
