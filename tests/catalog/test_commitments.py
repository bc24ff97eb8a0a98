"""Committed prices (`catalog/commitments.py`): the config's `pricing.discounts` (examples and
Hypothesis), `reserved_prices` over an offer table, and the published facts' integrity."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.catalog import Catalog
from gpulease.catalog.commitments import (
    Discount,
    discount_for,
    discounts_from_config,
    parse_off,
    published_discounts,
    reserved_prices,
)
from gpulease.errors import UserInputError


def _config(*items: Any) -> dict[str, Any]:
    return {"pricing": {"discounts": list(items)}}


def test_discounts_parse_with_defaults_and_percentages() -> None:
    found = discounts_from_config(_config(
        {"provider": "AWS", "commitment": "1Y", "discount": 0.3},
        {"provider": "gcp", "commitment": "3y", "discount": "45%", "regions": "europe-*",
         "note": "x"},
    ))  # fmt: skip
    assert found == (
        Discount("aws", "1y", 0.3),
        Discount("gcp", "3y", 0.45, ("europe-*",), "x"),
    )
    assert discounts_from_config({}) == () and discounts_from_config({"pricing": {}}) == ()


def test_off_is_an_alias_even_as_yaml_reads_it() -> None:
    # YAML 1.1 (PyYAML) reads a bare `off:` key as the boolean False
    text = "pricing:\n  discounts:\n    - {provider: aws, commitment: 1y, off: 0.3}\n"
    config = yaml.safe_load(text)
    assert False in config["pricing"]["discounts"][0]
    assert discounts_from_config(config) == (Discount("aws", "1y", 0.3),)
    assert discounts_from_config(_config({"provider": "aws", "commitment": "1y", "off": "30%"}))
    both = {"provider": "aws", "commitment": "1y", "off": 0.3, "discount": 0.3}
    with pytest.raises(UserInputError, match="give discount once"):
        discounts_from_config(_config(both))


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"commitment": "1y", "discount": 0.3}, r"\[0\]\.provider"),
        ({"provider": "aws", "commitment": "2y", "discount": 0.3}, r"\[0\]\.commitment"),
        ({"provider": "aws", "commitment": "1y", "discount": 1.5}, r"\[0\]\.discount"),
        ({"provider": "aws", "commitment": "1y", "discount": "thirty"}, r"\[0\]\.discount"),
        ({"provider": "aws", "commitment": "1y", "discount": True}, r"\[0\]\.discount"),
        ({"provider": "aws", "commitment": "1y", "discount": 0.3, "regions": [3]}, r"\.regions"),
        ({"provider": "aws", "commitment": "1y", "discount": 0.3, "pct": 1}, r"unknown field.*pct"),
        ("aws 30%", r"\[0\]: must be a mapping"),
    ],
)
def test_bad_discounts_name_the_field(item: Any, field: str) -> None:
    with pytest.raises(UserInputError, match=field):
        discounts_from_config(_config(item))


def test_the_section_and_duplicates_are_checked() -> None:
    with pytest.raises(UserInputError, match="pricing: must be a mapping"):
        discounts_from_config({"pricing": [1]})
    with pytest.raises(UserInputError, match=r"unknown field.*discount$"):
        discounts_from_config({"pricing": {"discount": []}})
    twice = {"provider": "aws", "commitment": "1y", "discount": 0.3}
    with pytest.raises(UserInputError, match="two discounts for aws 1y"):
        discounts_from_config(_config(twice, {**twice, "discount": 0.2}))


_PROVIDERS = st.sampled_from(["aws", "gcp", "azure", ""])
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
                    st.text(max_size=6), st.lists(st.text(max_size=4), max_size=2))  # fmt: skip
_ITEMS = st.one_of(
    st.fixed_dictionaries(
        {"provider": _PROVIDERS, "commitment": st.sampled_from(["1y", "3y", "5y", ""]),
         "discount": st.one_of(st.floats(-1, 2), st.text(max_size=4), _VALUES)},
        optional={"regions": _VALUES, "note": _VALUES, "other": _VALUES, "off": _VALUES},
    ),
    _VALUES,
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.lists(_ITEMS, max_size=4))
def test_parsing_gives_valid_discounts_or_a_user_error(items: list[Any]) -> None:
    try:
        found = discounts_from_config(_config(*items))
    except UserInputError as exc:
        assert "pricing" in str(exc)
        return
    for d in found:
        assert d.provider and d.commitment in ("1y", "3y") and 0 < d.off < 1


@given(st.floats(0.001, 0.999))
def test_off_as_a_fraction_or_a_percentage_agree(off: float) -> None:
    assert parse_off(f"{off * 100}%", "x") == pytest.approx(parse_off(off, "x"))


def test_reserved_prices_replace_the_column_where_a_discount_covers() -> None:
    offers = Catalog.load(bundled_only=True).offers
    discounts = (Discount("gcp", "1y", 0.25, ("us-*",)), Discount("lambda", "3y", 0.4))
    prices, user = reserved_prices(offers, "1y", discounts)
    gcp_us = (offers.provider == "gcp") & np.char.startswith(offers.region, "us-")
    assert gcp_us.any() and (user == gcp_us).all()
    assert np.allclose(prices[gcp_us], offers.price_on_demand[gcp_us] * 0.75, equal_nan=True)
    assert np.isnan(prices[~gcp_us]).all()  # the bundled snapshot publishes no reserved price
    three, user3 = reserved_prices(offers, "3y", discounts)
    lam = offers.provider == "lambda"
    assert (user3 == lam).all() and np.allclose(three[lam], offers.price_on_demand[lam] * 0.6)
    assert np.isnan(offers.price_reserved_1y).all()  # the table itself is left as it was


def test_the_last_covering_discount_wins() -> None:
    wide, narrow = Discount("aws", "1y", 0.2), Discount("aws", "1y", 0.35, ("eu-west-1",))
    assert discount_for([wide, narrow], "aws", "eu-west-1", "1y") is narrow
    assert discount_for([wide, narrow], "aws", "us-east-1", "1y") is wide
    assert discount_for([wide, narrow], "aws", "us-east-1", "3y") is None
    assert discount_for([wide, narrow], "gcp", "us-east-1", "1y") is None


def test_published_discounts_are_sourced_and_dated() -> None:
    rows = published_discounts()
    assert {r.provider for r in rows} >= {"gcp", "azure", "aws"}
    for r in rows:
        assert r.commitment in ("1y", "3y") and 0 < r.off < 1 and not math.isnan(r.off)
        assert r.kind in ("flat", "ceiling") and r.scope
        assert r.source_url.startswith("https://") and re.fullmatch(
            r"\d{4}-\d\d-\d\d", r.source_date
        )
