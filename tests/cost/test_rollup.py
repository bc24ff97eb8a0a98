"""The daily rollup (``ledger_days``) against the rows, on SQLite and on PostgreSQL: the report's
breakdown composed of the rollup's whole days, the open rows and the partial edge days equals
one pass over the rows (every ``--by``, periods on and off midnight, rows over several days,
at midnight, of zero length, open); and the writer's closes (:mod:`gpulease.state.ledger`)
build the same rollup as :func:`~gpulease.state.ledger.rebuild_days` over the rows."""

from __future__ import annotations

import random
from typing import Any

import pytest
from sqlalchemy import Engine, select

from gpulease.cost.overlap import MEASURES, SPLIT, Window
from gpulease.cost.period import GROUPS
from gpulease.cost.report import _from_rows, _sorted, breakdown
from gpulease.state import session_scope
from gpulease.state.ledger import (
    EntryFacts,
    advance,
    change_price,
    close,
    open_entry,
    rebuild_days,
)
from gpulease.state.models import LedgerDay
from tests.cost.seed import entry, insert_rows

H, D = 3600.0, 86400.0
T0 = 20_400 * D  # a midnight (2025-11-08)


def _rows(rnd: random.Random, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        start = T0 + rnd.choice([0.0, rnd.uniform(0, 9 * D), 3 * D, 5 * D - H])
        to_midnight = max(0.0, T0 + 5 * D - start)  # ends at a midnight
        length = rnd.choice([0.0, rnd.uniform(1, 6 * H), rnd.uniform(D, 3 * D), to_midnight])
        spot = rnd.random() < 0.5
        rows.append(
            entry(start, start + length, rnd.uniform(0.5, 9.0), billed_s=length + 60.0,
                  kind=rnd.choice(["instance", "instance", "volume", "storage"]),
                  cluster_name=rnd.choice(["a", "b", None]), job_id=rnd.choice([1, 12, None]),
                  task_name=rnd.choice(["train", None]), provider=rnd.choice(["aws", "sim"]),
                  region=rnd.choice(["r1", None]), accelerator=rnd.choice(["A100", None]),
                  pricing="spot" if spot else "on_demand", user=rnd.choice(["u1", "u2"]),
                  on_demand_price_per_hour=12.0 if spot else None, gpu_count=rnd.choice([0, 8]),
                  closed=rnd.random() < 0.8)
        )  # fmt: skip
    return rows


def _close(by: str, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    assert [g["key"] for g in a] == [g["key"] for g in b]
    # a day's row pass splits only the measures the report shows per day (SPLIT); its kinds
    # and spot cost go to the row's first day, as only their totals are shown
    shown = (*SPLIT, "entries") if by == "day" else MEASURES
    for x, y in zip(a, b, strict=True):
        for m in shown:
            assert x[m] == pytest.approx(y[m], rel=1e-9, abs=1e-9), (x["key"], m)


PERIODS = [(T0, T0 + 10 * D), (T0 + 0.5 * D, T0 + 7.25 * D), (T0 + 2 * D + 1, T0 + 4 * D),
           (T0 + H, T0 + 2 * H), (T0 - D, T0 + 30 * D)]  # fmt: skip


def test_the_rollup_composed_equals_one_pass_over_the_rows(engine: Engine) -> None:
    insert_rows(engine, _rows(random.Random(7), 120))
    with engine.connect() as conn:
        for start, end in PERIODS:
            window = Window(start, end)
            for by in GROUPS:
                _close(by, breakdown(conn, window, by), _sorted(by, _from_rows(conn, window, by)))


def _facts(subject: str, **kw: Any) -> EntryFacts:
    base: dict[str, Any] = dict(kind="instance", subject=subject, user="u1", provider="aws",
                                pricing="spot", price_per_hour=4.0, billing="second:60",
                                cluster_name="c1", job_id=3, region="r1", accelerator="A100",
                                gpu_count=8, on_demand_price_per_hour=10.0)  # fmt: skip
    return EntryFacts(**{**base, **kw})


def _days(engine: Engine) -> dict[tuple[str, int, str], tuple[float, ...]]:
    with engine.connect() as conn:
        t = LedgerDay.__table__
        names = [c.name for c in t.c if c.name not in ("id", "dim", "day", "key")]
        return {
            (r.dim, r.day, r.key): tuple(round(float(getattr(r, n)), 9) for n in names)
            for r in conn.execute(select(t))
        }


def test_the_writers_closes_build_the_rollup_of_the_rows(engine: Engine) -> None:
    with session_scope(engine) as session:
        a = open_entry(session, _facts("1"), started_at=T0 + 20 * H, now=T0 + 20 * H)
        advance(a, T0 + 30 * H, now=T0 + 30 * H)
        b = change_price(session, a, T0 + 40 * H, 5.0, now=T0 + 41 * H)  # a closes at 40 h
        advance(b, T0 + 3 * D, now=T0 + 3 * D)
        close(b, T0 + 3 * D + H, now=T0 + 3 * D + H)
        v = open_entry(session, _facts("2", kind="volume", pricing="on_demand", gpu_count=0),
                       started_at=T0 + 2 * D, now=T0 + 2 * D)  # fmt: skip
        close(v, T0 + 2 * D, now=T0 + 2 * D)  # zero length: whole, in its day
        close(v, T0 + 5 * D, now=T0 + 5 * D)  # closed already: nothing added twice
        open_entry(session, _facts("3"), started_at=T0, now=T0 + D)  # open: not in the rollup
    written = _days(engine)
    assert written and {day for _, day, _ in written} == {20_400, 20_401, 20_402, 20_403}
    assert all(key[1] <= 20_403 for key in written)
    with engine.begin() as conn:
        rebuild_days(conn)
    assert _days(engine) == written
