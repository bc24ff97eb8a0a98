"""The cost report over seeded ledger rows, on SQLite and on PostgreSQL: each ``--by``, the overlap
pro-rating (one row across the period's edge, one across midnight), spot savings, estimated
against actual, and the month's forecast at an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, insert

from gpulease.clock import VirtualClock
from gpulease.cost.period import GROUPS
from gpulease.cost.report import cost_report
from gpulease.errors import UserInputError
from gpulease.state.models import Cluster, Job
from tests.cost.seed import entry, insert_rows

H, D = 3600.0, 86400.0
NOV = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
NOW = NOV + 15 * D  # 2026-11-16T00:00Z


def _report(engine: Engine, **kw: str) -> dict[str, Any]:
    return cost_report(engine, clock=VirtualClock(NOW), **kw)


def _keys(report: dict[str, Any]) -> dict[str, float]:
    return {r["key"]: round(r["cost_usd"], 6) for r in report["breakdown"]}


def test_a_row_across_the_period_edge_counts_its_overlap(engine: Engine) -> None:
    insert_rows(engine, [entry(NOV - D, NOV + D, 10.0)])  # 48 h at $10/h, half in November
    report = _report(engine, month="2026-11")
    assert report["total"]["cost_usd"] == pytest.approx(240.0)
    assert report["total"]["billed_hours"] == pytest.approx(24.0)
    assert report["total"]["gpu_hours"] == pytest.approx(192.0)
    assert report["total"]["entries"] == 1
    assert _report(engine, month="2026-10")["total"]["cost_usd"] == pytest.approx(240.0)
    assert _report(engine, month="2026-09")["total"]["entries"] == 0


def test_by_day_splits_a_row_across_midnight(engine: Engine) -> None:
    insert_rows(engine, [
        entry(NOV + 12 * H, NOV + 2 * D + 12 * H, 1.0),  # 48 h over 3 days
        entry(NOV + 1 * H, NOV + 3 * H, 5.0),  # 2 h on the 1st
        entry(NOV + 5 * D, NOV + 5 * D, 0.0, billed_s=60, cost_usd=0.5),  # an instant's minimum
    ])  # fmt: skip
    report = _report(engine, month="2026-11", by="day")
    assert _keys(report) == {"2026-11-01": 22.0, "2026-11-02": 24.0, "2026-11-03": 12.0,
                             "2026-11-06": 0.5}  # fmt: skip
    assert sum(_keys(report).values()) == pytest.approx(report["total"]["cost_usd"])
    day_one = report["breakdown"][0]
    assert (day_one["entries"], day_one["billed_hours"]) == (2, pytest.approx(14.0))


def test_by_day_spreads_a_long_row_over_every_day_it_covers(engine: Engine) -> None:
    insert_rows(engine, [entry(NOV + 6 * H, NOV + 5 * D + 18 * H, 1.0, gpu_count=2),
                         entry(NOV + 2 * D + H, NOV + 4 * D, 0.5)])  # 47 h, 2 days  # fmt: skip
    rows = {r["key"]: r for r in _report(engine, month="2026-11", by="day")["breakdown"]}
    costs = {k: round(r["cost_usd"], 6) for k, r in rows.items()}
    assert costs == {"2026-11-01": 18.0, "2026-11-02": 24.0, "2026-11-03": 35.5,
                     "2026-11-04": 36.0, "2026-11-05": 24.0, "2026-11-06": 18.0}  # fmt: skip
    assert rows["2026-11-04"]["entries"] == 2 and rows["2026-11-05"]["entries"] == 1
    assert rows["2026-11-02"]["gpu_hours"] == pytest.approx(48.0)


def test_by_day_prorates_at_the_since_edge(engine: Engine) -> None:
    insert_rows(engine, [entry(NOW - 2 * D, NOW, 1.0)])
    report = _report(engine, since="36h", by="day")
    assert _keys(report) == {"2026-11-14": 12.0, "2026-11-15": 24.0}
    assert report["period"]["label"] == "since 36h"


DIMS: list[dict[str, Any]] = [
    dict(cluster_name="a", cluster_id=1, job_id=7, task_name="pre", provider="aws",
         region="us-east-1", accelerator="A100", pricing="on_demand", user="alice"),
    dict(cluster_name="b", cluster_id=2, job_id=None, task_name="ft", provider="sim",
         region="eu-west-1", accelerator="H100", pricing="spot", user="bob",
         on_demand_price_per_hour=9.0),
    dict(cluster_name=None, cluster_id=None, job_id=None, task_name=None, provider="aws",
         region=None, accelerator=None, pricing="on_demand", user="bob", kind="storage",
         quantity=100.0, gpu_count=0),
]  # fmt: skip
EXPECTED = {
    "cluster": {"a": 10.0, "b": 6.0, "-": 1.0},
    "job": {"7": 10.0, "-": 7.0},
    "task": {"pre": 10.0, "ft": 6.0, "-": 1.0},
    "provider": {"aws": 11.0, "sim": 6.0},
    "region": {"aws/us-east-1": 10.0, "sim/eu-west-1": 6.0, "aws/-": 1.0},
    "gpu": {"A100": 10.0, "H100": 6.0, "-": 1.0},
    "pricing": {"on_demand": 11.0, "spot": 6.0},
    "user": {"alice": 10.0, "bob": 7.0},
    "day": {"2026-11-02": 17.0},
}


@pytest.mark.parametrize("by", GROUPS)
def test_each_grouping(engine: Engine, by: str) -> None:
    start = NOV + D
    insert_rows(engine, [entry(start, start + 2 * H, price, **dims)
                         for price, dims in zip((5.0, 3.0, 0.5), DIMS, strict=True)])  # fmt: skip
    report = _report(engine, month="2026-11", by=by)
    assert _keys(report) == EXPECTED[by]
    assert list(_keys(report).values()) == sorted(_keys(report).values(), reverse=True)
    assert report["total"]["by_kind"] == {"instance": 16.0, "storage": 1.0}


def test_spot_savings_against_the_same_offer_on_demand(engine: Engine) -> None:
    spot = dict(pricing="spot", on_demand_price_per_hour=10.0)
    insert_rows(engine, [
        entry(NOV, NOV + 2 * H, 3.0, **spot),  # saves 2 h x $7
        entry(NOV + D - H, NOV + D + H, 4.0, **spot),  # saves 2 h x $6
        entry(NOV, NOV + 2 * H, 10.0),  # on demand: no saving
        entry(NOV, NOV + H, 2.0, pricing="spot"),  # no on-demand price known: no saving
    ])  # fmt: skip
    report = _report(engine, month="2026-11")
    saved = report["spot_savings"]
    assert saved["savings_usd"] == pytest.approx(14.0 + 12.0)
    assert saved["spot_cost_usd"] == pytest.approx(6.0 + 8.0 + 2.0)
    assert saved["on_demand_equivalent_usd"] == pytest.approx(16.0 + 26.0)
    by_pricing = {
        r["key"]: r["spot_savings_usd"] for r in _report(engine, by="pricing")["breakdown"]
    }
    assert by_pricing == {"spot": pytest.approx(26.0), "on_demand": 0.0}


def test_forecast_at_the_current_burn_rate(engine: Engine) -> None:
    insert_rows(engine, [
        entry(NOV, NOV + 10 * H, 3.0),  # closed: $30 so far
        entry(NOW - 5 * H, NOW - H, 2.0, closed=False),  # open, accrued to an hour ago: $8
        entry(NOW - 2 * H, NOW, 0.5, closed=False, kind="volume", quantity=500.0),  # $1
        entry(NOV - 3 * D, NOV - 2 * D, 100.0),  # October: not this month
    ])  # fmt: skip
    fc = _report(engine, since="7d")["forecast"]
    assert fc["month"] == "2026-11"
    assert fc["so_far_usd"] == pytest.approx(39.0)
    assert fc["burn_usd_per_hour"] == pytest.approx(2.5)
    assert fc["open_entries"] == 2
    assert fc["hours_left"] == pytest.approx(15 * 24)
    assert fc["forecast_usd"] == pytest.approx(39.0 + 2.0 * (15 * 24 + 1) + 0.5 * 15 * 24)


def test_estimated_against_actual(engine: Engine) -> None:
    target = {"provider": "aws", "price_per_hour": 4.0}
    doc = {"policy": {"job_s": 3 * H, "use_spot": "true"}, "spot": [target],
           "on_demand": [{**target, "price_per_hour": 10.0}], "task_id": "t"}  # fmt: skip
    with engine.begin() as conn:
        job_id = _new(conn, insert(Job).values(**_job("est", doc)).returning(Job.id))
        plain = _new(conn, insert(Job).values(**_job("noest", {"policy": {}})).returning(Job.id))
        new_cluster = insert(Cluster).values(**_cluster("solo", 2.0)).returning(Cluster.id)
        cluster_id = _new(conn, new_cluster)
    insert_rows(engine, [
        entry(NOV - D, NOV - D + H, 5.0, job_id=job_id, cluster_id=98),  # October: the run
        entry(NOV, NOV + 2 * H, 4.0, job_id=job_id, cluster_id=98),
        entry(NOV, NOV + H, 1.0, job_id=plain, cluster_id=99),
        entry(NOV, NOV + 3 * H, 2.5, cluster_id=cluster_id, job_id=None),
        entry(NOV, NOV + 3 * H, 0.1, cluster_id=cluster_id, job_id=None, kind="volume"),
    ])  # fmt: skip
    rows: list[dict[str, Any]] = _report(engine, month="2026-11")["estimates"]
    found = {(r["kind"], r["name"]): r for r in rows}
    assert set(found) == {("job", "est"), ("cluster", "solo")}
    job = found["job", "est"]
    assert (job["estimated_usd"], job["actual_usd"]) == (pytest.approx(12.0), pytest.approx(13.0))
    assert job["difference_usd"] == pytest.approx(1.0)
    solo = found["cluster", "solo"]
    assert solo["estimated_usd"] == pytest.approx(6.0)
    assert solo["actual_usd"] == pytest.approx(7.8)


def test_bad_by_names_the_option(engine: Engine) -> None:
    with pytest.raises(UserInputError, match=r"^--by: expected one of day, cluster"):
        _report(engine, by="week")


def _new(conn: Connection, statement: Any) -> int:
    return int(conn.execute(statement).scalar_one())


def _job(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    return dict(name=name, owner="o", status="succeeded", status_changed_at=NOV, task=doc,
                clock="system", attempt=1, recoveries=0, restarts=0, blocked=[], events=[],
                cost_usd=0.0, run_s=0.0, started_at_job=NOV, cancel_requested=False,
                created_at=NOV, updated_at=NOV)  # fmt: skip


def _cluster(name: str, quote: float) -> dict[str, Any]:
    return dict(name=name, owner="o", status="terminated", status_changed_at=NOV,
                provider="aws", gpus_per_node=8, num_nodes=1, pricing="on_demand",
                price_per_hour=quote, task={}, autostop_down=False, failover_history=[],
                created_at=NOV, updated_at=NOV)  # fmt: skip
