"""A scope's spend in a period from seeded ``ledger_entries`` rows (SQLite and PostgreSQL):
rows overlapping the period's start are pro-rated, the scope filters provider / task glob /
user."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from gpulease.cost.budgets import BudgetScope
from gpulease.cost.spend import scope_spend
from gpulease.state import session_scope
from tests.cost.ledger_rows import seed_row

DAY = 86400.0
START = 100 * DAY  # a period [START, START + DAY)


def _spend(engine: Engine, scope: BudgetScope, end: float = START + DAY) -> float:
    with session_scope(engine) as session:
        return scope_spend(session, scope, START, end)


def test_rows_count_by_their_overlap(engine: Engine) -> None:
    seed_row(engine, started_at=START - 3600, ended_at=START + 3600, cost_usd=10.0)  # half in
    seed_row(engine, started_at=START + 7200, ended_at=START + 10800, cost_usd=4.0)  # all in
    seed_row(engine, started_at=START - 7200, ended_at=START - 3600, cost_usd=100.0)  # before
    seed_row(engine, started_at=START + DAY, ended_at=START + DAY + 60, cost_usd=100.0)  # after
    seed_row(engine, started_at=START + 60, ended_at=START + 60, cost_usd=0.5)  # minimum
    assert _spend(engine, BudgetScope()) == pytest.approx(5.0 + 4.0 + 0.5)
    # a period cut at "now" counts the part of a row up to it
    cut = _spend(engine, BudgetScope(), end=START + 9000)
    assert cut == pytest.approx(5.0 + 0.5 + 4.0 * 1800 / 3600)


def test_the_scope_filters_provider_task_glob_and_user(engine: Engine) -> None:
    seed_row(engine, started_at=START, ended_at=START + 60, cost_usd=1.0)
    seed_row(engine, started_at=START, ended_at=START + 60, cost_usd=2.0, provider="aws")
    seed_row(engine, started_at=START, ended_at=START + 60, cost_usd=4.0, task_name="eval-7")
    seed_row(engine, started_at=START, ended_at=START + 60, cost_usd=8.0, user="bob")
    seed_row(engine, started_at=START, ended_at=START + 60, cost_usd=16.0, task_name=None)
    assert _spend(engine, BudgetScope()) == pytest.approx(31.0)
    assert _spend(engine, BudgetScope(providers=("aws",))) == pytest.approx(2.0)
    assert _spend(engine, BudgetScope(task="eval-*")) == pytest.approx(4.0)
    assert _spend(engine, BudgetScope(user="bob")) == pytest.approx(8.0)
    assert _spend(engine, BudgetScope(providers=("local",), user="alice")) == pytest.approx(21.0)
