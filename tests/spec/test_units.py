"""The quantity parsers of gpulease.units that task files rely on."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.units import Minimum, parse_count, parse_duration_hours, parse_minimum, parse_money

from .strategies import examples


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7B", 7e9),
        ("70e9", 70e9),
        ("1.5T", 1.5e12),
        ("350M", 350e6),
        ("12k", 12e3),
        ("1.28m", 1.28e6),
        ("12_000", 12000.0),
        ("1,200", 1200.0),
        (" 25.6M ", 25.6e6),
        ("12.3e9", 12.3e9),
        ("1e+20", 1e20),
        (7, 7.0),
        (1.5, 1.5),
        (0, 0.0),
    ],
)
def test_parse_count_reads_suffixes_and_exponents(text: object, expected: float) -> None:
    assert parse_count(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["", "B", "7X", "-7B", "seven", "1e400", True, None, [7], "nan"])
def test_parse_count_refuses_what_is_not_a_count(bad: object) -> None:
    with pytest.raises(ValueError, match=r"expected a number|finite|negative"):
        parse_count(bad)


@pytest.mark.parametrize(
    ("text", "hours"),
    [
        ("36h", 36.0),
        ("3d", 72.0),
        ("90m", 1.5),
        ("1.5h", 1.5),
        ("2w", 336.0),
        ("45s", 45 / 3600),
        ("2 days", 48.0),
        ("36", 36.0),
        (12, 12.0),
        (0.5, 0.5),
    ],
)
def test_parse_duration_hours(text: object, hours: float) -> None:
    assert parse_duration_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize("bad", ["", "soon", "3 fortnights", "-1h", "h", True, None, {"h": 1}])
def test_parse_duration_refuses_bad_durations(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration_hours(bad)


@pytest.mark.parametrize(
    ("text", "usd"),
    [
        ("$500", 500.0),
        ("500", 500.0),
        ("1,200.50", 1200.5),
        ("$2k", 2000.0),
        ("40 USD", 40.0),
        (3, 3.0),
    ],
)
def test_parse_money(text: object, usd: float) -> None:
    assert parse_money(text) == pytest.approx(usd)


@pytest.mark.parametrize("bad", ["", "$", "five dollars", "-$5", True, None])
def test_parse_money_refuses_bad_amounts(bad: object) -> None:
    with pytest.raises(ValueError, match="amount"):
        parse_money(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8+", Minimum(8, at_least=True)),
        ("8", Minimum(8)),
        (16, Minimum(16)),
        ("32GB+", Minimum(32, at_least=True)),
        ("64gb", Minimum(64)),
        (Minimum(4, True), Minimum(4, True)),
    ],
)
def test_parse_minimum(text: object, expected: Minimum) -> None:
    assert parse_minimum(text) == expected


@pytest.mark.parametrize("bad", ["", "+", "lots", "-1", "nan", "inf+", True, None, [8]])
def test_parse_minimum_refuses_bad_amounts(bad: object) -> None:
    with pytest.raises(ValueError, match=r"amount|finite|negative"):
        parse_minimum(bad)


def test_minimum_admits_and_prints() -> None:
    assert Minimum(8, at_least=True).admits(16)
    assert not Minimum(8).admits(16)
    assert Minimum(8).admits(8)
    assert str(Minimum(8, at_least=True)) == "8+"
    assert str(Minimum(1.5)) == "1.5"


_ANY_INPUT = st.one_of(
    st.text(max_size=20),
    st.from_regex(r"\s*[0-9_,.]{1,6}(e[+-]?[0-9]{1,3})?\s*[a-zA-Z+$]{0,6}\s*", fullmatch=True),
    st.integers(min_value=-(10**300), max_value=10**300),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


@examples(300)
@given(_ANY_INPUT)
def test_parsers_return_finite_non_negative_values_or_raise_value_error(value: object) -> None:
    for parse in (parse_count, parse_duration_hours, parse_money):
        try:
            result = parse(value)
        except ValueError:
            continue
        assert math.isfinite(result)
        assert result >= 0
    try:
        amount = parse_minimum(value)
    except ValueError:
        return
    assert math.isfinite(amount.value)
    assert amount.value >= 0


@pytest.mark.parametrize("parse", [parse_count, parse_duration_hours, parse_money, parse_minimum])
def test_parsers_refuse_huge_integers_with_value_error(parse: object) -> None:
    assert callable(parse)
    with pytest.raises(ValueError):
        parse(10**400)
