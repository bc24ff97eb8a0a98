"""The ledger writer: idempotent opens, advances that never go back, price changes that split a
run without double-billing, and the billing rules (per second with a minimum per run, per
minute, per hour rounding up per run)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from gpulease.state import session_scope
from gpulease.state.ledger import (
    BadBillingRule,
    Billing,
    EntryFacts,
    accrued_by_labels,
    advance,
    change_price,
    close,
    entry_key,
    entry_subject,
    job_spend,
    open_entries,
    open_entry,
    replace_facts,
)
from gpulease.state.models import LedgerEntry

T0 = 1_700_000_000.0


def _facts(billing: str = "second", price: float = 3.6, **kw: object) -> EntryFacts:
    values: dict[str, object] = {
        "kind": "instance", "subject": "7", "node_id": 7, "user": "ann", "provider": "sim",
        "pricing": "spot", "price_per_hour": price, "billing": billing, "job_id": 3,
        "cluster_name": "c-3-1", "region": "us-east-1", "instance_type": "p4d",
    }  # fmt: skip
    values.update(kw)
    return EntryFacts(**values)  # type: ignore[arg-type]


def test_billing_rules() -> None:
    assert Billing.parse("second").billed(61.5) == 61.5
    per_s_min = Billing.parse("second:60")
    assert (per_s_min.billed(0), per_s_min.billed(1), per_s_min.billed(75)) == (0, 60, 75)
    assert Billing.parse("minute").billed(61) == 120
    assert Billing.parse("hour").billed(3601) == 7200
    assert Billing.parse("hour,request").from_request
    for bad in ("fortnight", "second:-1", "second:x", "hour,later"):
        with pytest.raises(BadBillingRule, match="billing rule"):
            Billing.parse(bad)


@given(
    st.sampled_from(["second", "second:60", "minute", "hour"]),
    st.lists(st.floats(0.0, 5000.0), min_size=1, max_size=6),
)
def test_rows_of_a_run_sum_to_the_rule_on_the_whole_run(rule: str, cuts: list[float]) -> None:
    billing = Billing.parse(rule)
    points = [0.0, *sorted(cuts)]
    pieces = [billing.billed(b) - billing.billed(a) for a, b in itertools.pairwise(points)]
    assert sum(pieces) == pytest.approx(billing.billed(points[-1]))


def test_open_is_idempotent_and_advance_never_goes_back(engine: Engine) -> None:
    with session_scope(engine) as session:
        row = open_entry(session, _facts(), started_at=T0, now=T0)
        again = open_entry(session, _facts(), started_at=T0, now=T0 + 5)
        assert again.id == row.id
        assert advance(row, T0 + 100, now=T0 + 100)
        assert not advance(row, T0 + 50, now=T0 + 101)  # earlier: a no-op
        assert not advance(row, T0 + 100, now=T0 + 102)  # equal: a no-op
        assert (row.billed_s, row.cost_usd) == (100.0, pytest.approx(0.1))
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 1


def test_a_price_change_splits_the_run_and_bills_the_minimum_once(engine: Engine) -> None:
    with session_scope(engine) as session:
        first = open_entry(session, _facts("second:60"), started_at=T0, now=T0)
        advance(first, T0 + 10, now=T0 + 10)
        assert first.billed_s == 60.0  # the minimum, on the run's first row
        second = change_price(session, first, T0 + 30, 7.2, now=T0 + 40)
        assert change_price(session, first, T0 + 30, 7.2, now=T0 + 41).id == second.id
        assert first.closed and first.ended_at == T0 + 30 and first.billed_s == 60.0
        advance(second, T0 + 100, now=T0 + 100)
        assert second.billed_s == 40.0  # 100 s of run billed, 60 of them on the first row
        close(second, T0 + 100, now=T0 + 100)
        assert not close(second, T0 + 200, now=T0 + 200)
        assert second.ended_at == T0 + 100
        assert open_entries(session) == []
        expected = 60 * 3.6 / 3600 + 40 * 7.2 / 3600
        assert job_spend(session, 3) == pytest.approx(expected)
        ((labels, total),) = accrued_by_labels(session)
        assert labels == ("c-3-1", 3, "sim", "us-east-1", "p4d", "spot")
        assert total == pytest.approx(expected)


def test_hour_rounding_is_per_run(engine: Engine) -> None:
    with session_scope(engine) as session:
        row = open_entry(session, _facts("hour"), started_at=T0, now=T0)
        advance(row, T0 + 1, now=T0 + 1)
        assert row.billed_s == 3600.0
        nxt = change_price(session, row, T0 + 1800, 1.0, now=T0 + 1800)
        advance(nxt, T0 + 3000, now=T0 + 3000)
        assert nxt.billed_s == 0.0  # still inside the hour the first row paid for
        advance(nxt, T0 + 3700, now=T0 + 3700)
        assert nxt.billed_s == 3600.0


def test_facts_are_checked() -> None:
    with pytest.raises(ValueError, match="ledger kind"):
        _facts(kind="gpu")
    with pytest.raises(BadBillingRule):
        _facts("weekly")


SUBJECTS = st.builds(
    str.__add__,
    st.sampled_from(["", "s3://", "file:///", "sha256:", "gs://bucket/"]),
    st.text(st.sampled_from("ab9:/.-_é"), max_size=30),
)


@given(st.text(st.characters(exclude_characters=":"), min_size=1), SUBJECTS, st.floats(0, 4e9))
def test_the_subject_is_read_back_from_any_key(kind: str, subject: str, started_at: float) -> None:
    assert entry_subject(entry_key(kind, subject, started_at)) == subject


def test_a_storage_row_keeps_a_store_url_as_its_subject(engine: Engine) -> None:
    url = "s3://bucket/runs/a:b"  # the split on every ':' made this "s3"
    facts = _facts(kind="storage", subject=url, node_id=None, quantity=2.0)
    with session_scope(engine) as session:
        row = open_entry(session, facts, started_at=T0, now=T0)
        assert replace_facts(row) == facts
        nxt = change_price(session, row, T0 + 60, 7.2, now=T0 + 60)
        assert nxt.entry_key == entry_key("storage", url, T0 + 60)
        assert entry_subject(nxt.entry_key) == url
