"""Spot availability traces: reading, validating, writing and generating them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.errors import UserInputError
from gpulease.spot import Trace, generate_trace, load_trace, write_trace


def test_round_trip_and_queries(tmp_path: Path) -> None:
    trace = Trace(600.0, (1, 1, 0, 0, 2, 1), metadata={"region": "x"})
    path = tmp_path / "t.json"
    write_trace(path, trace)
    loaded = load_trace(path)
    assert loaded.data == trace.data and loaded.gap_seconds == 600.0
    assert loaded.metadata["region"] == "x"
    assert loaded.available_at(0) and not loaded.available_at(1200)
    assert loaded.available(4, nodes=2) and not loaded.available(5, nodes=2)
    assert loaded.next_change(0) == 1200.0 and loaded.next_change(1300) == 2400.0
    assert loaded.tick_at(3600 + 10) == 0  # repeats past its end
    assert loaded.availability() == pytest.approx(4 / 6)


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ([], "(top level)"),
        ({"data": [1]}, "metadata"),
        ({"metadata": {"gap_seconds": 0}, "data": [1]}, "metadata.gap_seconds"),
        ({"metadata": {"gap_seconds": 60}, "data": []}, "data"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, -1]}, "data[1]"),
        ({"metadata": {"gap_seconds": 60}, "data": [1, "x"]}, "data[1]"),
    ],
)
def test_bad_traces_name_the_field(tmp_path: Path, doc: object, field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_trace(path)


def test_unreadable_and_invalid_json_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="file"):
        load_trace(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(UserInputError, match="line 1"):
        load_trace(tmp_path / "x.json")


def test_generated_trace_has_about_the_asked_availability() -> None:
    trace = generate_trace(20_000, availability=0.7, mean_outage_ticks=5, seed=3)
    assert trace.availability() == pytest.approx(0.7, abs=0.05)
    assert generate_trace(100, seed=3) == generate_trace(100, seed=3)


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_any_json_document_is_a_trace_or_a_user_error(doc: object) -> None:
    from gpulease.spot.traces import trace_from_json

    try:
        trace = trace_from_json(doc)
    except UserInputError:
        return
    assert trace.gap_seconds > 0 and len(trace) > 0
