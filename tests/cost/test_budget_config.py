"""``budgets:`` of the config: validation with messages naming the field, and UTC calendar
periods (day, ISO week from Monday, month)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.cost.budgets import Budget, parse_budgets, period_bounds, period_label
from gpulease.errors import UserInputError


def _ts(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


def test_the_issue_example_parses_with_defaults() -> None:
    (budget,) = parse_budgets(
        [
            {
                "name": "team-monthly",
                "period": "month",
                "limit": 500,
                "scope": {"providers": ["aws"]},
                "action": "block",
            }
        ]
    )
    assert budget.limit == 500.0
    assert budget.warn_at == 0.8
    assert budget.scope.providers == ("aws",)
    assert budget.scope.matches(provider="aws", task_name="x", user="u")
    assert not budget.scope.matches(provider="local", task_name="x", user="u")
    assert parse_budgets(None) == ()


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"name": "b", "period": "month", "limit": -1}, "budgets[0].limit"),
        ({"name": "b", "period": "year", "limit": 5}, "budgets[0].period"),
        ({"name": "b", "period": "day", "limit": 5, "warn_at": 1.5}, "budgets[0].warn_at"),
        ({"name": "b", "period": "day", "limit": 5, "action": "kill"}, "budgets[0].action"),
        (
            {"name": "b", "period": "day", "limit": 5, "scope": {"zone": "x"}},
            "budgets[0].scope.zone",
        ),
        ({"period": "day", "limit": 5}, "budgets[0].name"),
        ({"name": "b", "period": "day", "limit": "lots"}, "budgets[0].limit"),
    ],
)
def test_bad_entries_name_their_field(entry: dict[str, Any], field: str) -> None:
    with pytest.raises(UserInputError) as caught:
        parse_budgets([entry])
    assert str(caught.value).startswith(f"{field}: "), caught.value


def test_a_name_used_twice_and_a_non_list_are_refused() -> None:
    entry = {"name": "b", "period": "day", "limit": 5}
    with pytest.raises(UserInputError, match=r"budgets\[1\]\.name: 'b' is used twice"):
        parse_budgets([entry, entry])
    with pytest.raises(UserInputError, match="budgets: must be a list"):
        parse_budgets({"name": "b"})


def test_periods_are_utc_calendar_periods() -> None:
    at = _ts(2026, 12, 3, 15, 30)  # a Thursday
    assert period_bounds("day", at) == (_ts(2026, 12, 3), _ts(2026, 12, 4))
    assert period_bounds("week", at) == (_ts(2026, 11, 30), _ts(2026, 12, 7))  # from Monday
    assert period_bounds("month", at) == (_ts(2026, 12, 1), _ts(2027, 1, 1))
    assert period_bounds("month", _ts(2028, 2, 10)) == (_ts(2028, 2, 1), _ts(2028, 3, 1))
    assert period_label("week", at) == "2026-W49"
    assert period_label("month", at) == "2026-12"
    assert period_label("day", at) == "2026-12-03"


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(["day", "week", "month"]))
def test_a_period_holds_its_instant(at: float, period: Any) -> None:
    start, end = period_bounds(period, at)
    assert start <= at < end
    assert period_bounds(period, start) == (start, end)
    assert period_bounds(period, end)[0] == end  # periods tile time


_entries = st.fixed_dictionaries(
    {
        "name": st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
        "period": st.sampled_from(["day", "week", "month"]),
        "limit": st.floats(min_value=0.01, max_value=1e7),
    },
    optional={
        "warn_at": st.floats(min_value=0.01, max_value=1.0),
        "action": st.sampled_from(["block", "stop", "down"]),
        "scope": st.fixed_dictionaries(
            {},
            optional={
                "providers": st.lists(st.sampled_from(["aws", "local", "sim"]), max_size=3),
                "task": st.from_regex(r"[a-z*?]{1,8}", fullmatch=True),
                "user": st.from_regex(r"[a-z]{1,8}", fullmatch=True),
            },
        ),
    },
)
_junk = st.one_of(
    st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
)


@given(_entries)
def test_valid_entries_round_trip(entry: dict[str, Any]) -> None:
    (budget,) = parse_budgets([entry])
    assert Budget.model_validate(budget.model_dump()) == budget
    assert budget.limit == entry["limit"]


@given(_entries, st.sampled_from(["name", "period", "limit", "warn_at", "action", "scope"]), _junk)
def test_any_broken_field_is_named_or_accepted(entry: dict[str, Any], key: str, junk: Any) -> None:
    """A parser that never crashes: a bad value is a UserInputError naming budgets[0].<field>."""
    try:
        parse_budgets([{**entry, key: junk}])
    except UserInputError as exc:
        assert str(exc).startswith(f"budgets[0].{key}"), exc
