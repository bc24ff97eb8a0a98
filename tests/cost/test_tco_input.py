"""The inputs of `gpulease tco` (cost/tco_input.py): `--gpus NAME:COUNT`, every field's checks,
and Hypothesis properties: any mapping gives a valid input or a UserInputError naming a flag."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.cost.tco_input import (
    FIELDS,
    HOURS_PER_MONTH,
    Compare,
    parse_gpus,
    read_tco_file,
    tco_input,
)
from gpulease.errors import UserInputError

REQUIRED = {"gpus": "A100-80GB:8", "months": 36, "hours_per_month": 500}


def test_gpus_spellings_resolve_to_the_canonical_name() -> None:
    assert parse_gpus("A100-80GB:8") == ("A100-80GB", 8)
    assert parse_gpus("a100_80gb:16") == ("A100-80GB", 16)
    assert parse_gpus(" h100 :64") == ("H100", 64)


@pytest.mark.parametrize("bad", ["A100-80GB", "A100-80GB:0", ":8", "A100-80GB:x", "A100:-1", 8])
def test_bad_gpus_name_the_flag(bad: Any) -> None:
    with pytest.raises(UserInputError, match="--gpus"):
        parse_gpus(bad)


def test_a_full_input_with_every_field() -> None:
    values = {
        **REQUIRED, "gpus_per_server": 4, "currency": "cny", "rate": "7.2", "providers": "aws",
        "commitment": "3Y", "committed_off": "30%", "purchase_per_server": 0,
        "compare": {"label": "x", "rented_on_demand": 240000, "hardware": 8e6},
    }  # fmt: skip
    got = tco_input(values)
    assert (got.accelerator, got.gpus, got.gpus_per_server, got.servers) == ("A100-80GB", 8, 4, 2)
    assert (got.currency, got.rate, got.providers, got.commitment) == ("CNY", 7.2, ("aws",), "3y")
    assert got.committed_off == pytest.approx(0.3) and got.purchase_per_server == 0
    assert got.compare == Compare("x", 240000.0, 8e6)
    assert tco_input({**REQUIRED, "hours-per-month": 730}).hours_per_month == HOURS_PER_MONTH


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        ({"months": 0}, "--months"),
        ({"rate": -7}, "--rate"),
        ({"pue": "high"}, "--pue"),
        ({"server_watts": True}, "--server-watts"),
        ({"gpus_per_server": 2.5}, "--gpus-per-server"),
        ({"commitment": "2y"}, "--commitment"),
        ({"committed_off": 1.2}, "--committed-off"),
        ({"compare": {"price": 1}}, "--compare"),
        ({"colour": "red"}, "unknown input.*colour"),
        ({"accelerator": "H100"}, "unknown input.*accelerator"),  # it is part of --gpus
    ],
)
def test_each_bad_field_is_named(extra: dict[str, Any], flag: str) -> None:
    with pytest.raises(UserInputError, match=flag):
        tco_input({**REQUIRED, **extra})


def test_the_file_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("- gpus\n")
    with pytest.raises(UserInputError, match="a mapping"):
        read_tco_file(path)
    path.write_text("gpus: [unclosed\n")
    with pytest.raises(UserInputError, match="not valid YAML"):
        read_tco_file(path)


_NAMES = st.sampled_from([*sorted(set(FIELDS) - {"accelerator"}), "gpus", "other"])
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5000), st.floats(allow_nan=True, width=32),
    st.text(max_size=12), st.sampled_from(["A100-80GB:8", "H100:16", "1y", "3y", "CNY", "30%"]),
    st.lists(st.text(max_size=4), max_size=2), st.dictionaries(st.text(max_size=5), st.integers(),
    max_size=2),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_NAMES, _VALUES, max_size=6), st.booleans())
def test_any_mapping_gives_a_valid_input_or_a_named_user_error(
    values: dict[str, Any], with_required: bool
) -> None:
    merged = {**REQUIRED, **values} if with_required else values
    try:
        got = tco_input(merged)
    except UserInputError as exc:
        assert str(exc).startswith("tco: ")
        return
    assert got.gpus >= 1 and got.months > 0 and 0 < got.hours_per_month <= HOURS_PER_MONTH
    assert got.rate > 0 and got.commitment in ("1y", "3y") and len(got.currency) == 3
    assert got.servers * got.gpus_per_server >= got.gpus


@given(st.integers(1, 10_000), st.sampled_from(["A100-80GB", "a100 80gb", "H100", "L4"]))
def test_gpus_round_trip(count: int, name: str) -> None:
    canonical, parsed = parse_gpus(f"{name}:{count}")
    assert parsed == count and parse_gpus(f"{canonical}:{count}") == (canonical, count)
