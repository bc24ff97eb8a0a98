"""The period parser of ``gpulease cost``: ``--since`` durations and ``--month`` months, and a bad
value names its option (hypothesis over the accepted and the rejected forms)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.cost.period import month_bounds, month_of, parse_since, resolve
from gpulease.errors import UserInputError

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@given(st.integers(1, 1000), st.sampled_from(sorted(UNITS)), st.booleans())
def test_a_duration_is_its_number_times_its_unit(n: int, unit: str, upper: bool) -> None:
    text = f"{n}{unit.upper() if upper else unit}"
    assert parse_since(text) == n * UNITS[unit]


@given(st.text(max_size=12))
def test_anything_else_is_refused_naming_since(text: str) -> None:
    try:
        seconds = parse_since(text)
    except UserInputError as exc:
        assert str(exc).startswith("--since:")
    else:  # only a well-formed duration gets through
        stripped = text.strip()
        assert stripped[:-1].strip().isdigit() and stripped[-1].lower() in UNITS
        assert 0 < seconds <= 20 * 366 * 86400


@pytest.mark.parametrize("text", ["0d", "-3d", "30", "d", "1.5d", "30 days", "99999999w"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(UserInputError, match=r"^--since:"):
        parse_since(text)


@given(st.integers(1970, 9998), st.integers(1, 12))
def test_a_month_is_its_calendar_month_in_utc(year: int, month: int) -> None:
    start, end = month_bounds(f"{year:04d}-{month:02d}")
    assert start == datetime(year, month, 1, tzinfo=UTC).timestamp()
    after = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC).timestamp()
    assert end == after
    assert month_of(start) == (f"{year:04d}-{month:02d}", start, end)
    assert month_of(end - 0.5)[1] == start


@pytest.mark.parametrize("text", ["2026-13", "2026-00", "2026-1", "26-11", "november", "1969-12"])
def test_bad_months(text: str) -> None:
    with pytest.raises(UserInputError, match=r"^--month:"):
        month_bounds(text)


def test_resolve_defaults_to_30_days_and_refuses_both() -> None:
    now = 1_800_000_000.0
    period = resolve(None, None, now)
    assert (period.start, period.end, period.label) == (now - 30 * 86400, now, "since 30d")
    assert resolve(None, "2026-11", now).label == "month 2026-11"
    with pytest.raises(UserInputError, match="--since and --month"):
        resolve("7d", "2026-11", now)
