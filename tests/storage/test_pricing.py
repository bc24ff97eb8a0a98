"""The config's ``cost:`` section (checkpoint-store prices, the measuring interval): defaults,
accepted forms, and a clear error naming the key for anything else."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import UserInputError
from gpulease.storage.pricing import (
    DEFAULT_MEASURE_EVERY_S,
    StoragePricing,
    scheme_of,
    storage_pricing,
)


def test_the_defaults_are_the_s3_list_price_and_a_free_local_disk() -> None:
    for config in ({}, {"cost": None}, {"cost": {}}):
        pricing = storage_pricing(config)
        assert pricing == StoragePricing({"s3": 0.023, "local": 0.0}, DEFAULT_MEASURE_EVERY_S)
    pricing = storage_pricing({})
    assert pricing.price_of("s3://bucket/runs") == 0.023
    assert pricing.price_of("local:///data") == pricing.price_of("/data") == 0.0
    assert pricing.price_of("gs://bucket") == 0.0  # no such store: nothing to bill
    assert pricing.bills_anything


def test_one_number_prices_every_scheme_and_a_mapping_only_its_own() -> None:
    every = storage_pricing({"cost": {"storage_usd_per_gb_month": 0.05}})
    assert every.usd_per_gb_month == {"s3": 0.05, "local": 0.05}
    own = storage_pricing({"cost": {"storage_usd_per_gb_month": {"local": "$1.5"},
                                    "storage_measure_every": "30m"}})  # fmt: skip
    assert own.usd_per_gb_month == {"s3": 0.023, "local": 1.5}
    assert own.measure_every_s == 1800.0
    assert storage_pricing({"cost": {"storage_measure_every": "45s"}}).measure_every_s == 45.0
    assert storage_pricing({"cost": {"storage_measure_every": 2}}).measure_every_s == 7200.0
    free = storage_pricing({"cost": {"storage_usd_per_gb_month": 0}})
    assert not free.bills_anything


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ([1], r"^cost: must be a mapping"),
        ({"storage_usd": 1}, r"^cost\.storage_usd: unknown key"),
        (
            {"storage_usd_per_gb_month": {"gcs": 1}},
            r"^cost\.storage_usd_per_gb_month\.gcs: unknown",
        ),
        ({"storage_usd_per_gb_month": {"s3": -1}}, r"^cost\.storage_usd_per_gb_month\.s3: "),
        ({"storage_usd_per_gb_month": {"s3": "cheap"}}, r"^cost\.storage_usd_per_gb_month\.s3: "),
        ({"storage_usd_per_gb_month": True}, r"^cost\.storage_usd_per_gb_month: "),
        ({"storage_measure_every": "0s"}, r"^cost\.storage_measure_every: a duration longer"),
        ({"storage_measure_every": "soon"}, r"^cost\.storage_measure_every: expected"),
        ({"storage_measure_every": 1e307}, r"^cost\.storage_measure_every: a duration longer"),
    ],
)
def test_a_bad_value_names_its_key(section: Any, message: str) -> None:
    with pytest.raises(UserInputError, match=message):
        storage_pricing({"cost": section})


_PRICES = st.floats(min_value=0, max_value=1e6, allow_nan=False)
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(), st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["s3", "local", "gcs"]), st.one_of(_PRICES, st.text()),
                    max_size=3),
)  # fmt: skip


@given(prices=_VALUES, every=_VALUES)
def test_any_value_parses_or_is_a_user_input_error_naming_the_key(
    prices: object, every: object
) -> None:
    try:
        pricing = storage_pricing(
            {"cost": {"storage_usd_per_gb_month": prices, "storage_measure_every": every}}
        )
    except UserInputError as exc:
        assert str(exc).startswith("cost."), exc
        return
    assert pricing.measure_every_s > 0 and math.isfinite(pricing.measure_every_s)
    assert set(pricing.usd_per_gb_month) == {"s3", "local"}
    assert all(v >= 0 and math.isfinite(v) for v in pricing.usd_per_gb_month.values())


@given(price=_PRICES, scheme=st.sampled_from(["s3", "local"]))
def test_a_price_given_is_the_price_of_that_schemes_urls(price: float, scheme: str) -> None:
    pricing = storage_pricing({"cost": {"storage_usd_per_gb_month": {scheme: price}}})
    url = "s3://b/p" if scheme == "s3" else "/data/ckpt"
    assert scheme_of(url) == scheme and pricing.price_of(url) == pytest.approx(price)
