"""``gpulease.cost.sla`` on a seeded history (real schema, SQLite, injected time): a node the
provider lost is a breach until its replacement is ready, a spot preemption and a user's stop
are not, an agent unreachable for an hour is, an API outage longer than the window counts while
nodes ran and a shorter one does not; availability and the credit to the cent."""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpulease.cost.sla import AUTOSTOP, GONE_REASON, clauses, parse_month, report
from gpulease.errors import UserInputError
from gpulease.state import make_engine, session_scope
from gpulease.state.models import LedgerEntry, ProviderOutage, StatusChange
from tests.dbfixtures import sqlite_template  # noqa: F401 - a fixture

S = datetime(2026, 11, 1, tzinfo=UTC).timestamp()
H = 3600.0
NOW = S + 40 * 24 * H  # the month is over
CONFIG: dict[str, Any] = {
    "sla": {"aws": {"promise": 99.9, "api_window_minutes": 5, "credit": {"per_outage_hour": 10}}}
}


@pytest.fixture
def engine(sqlite_template: Path, tmp_path: Path) -> Iterator[Engine]:  # noqa: F811
    path = tmp_path / "state.db"
    shutil.copyfile(sqlite_template, path)
    eng = make_engine(f"sqlite:///{path}")
    yield eng
    eng.dispose()


def ledger(  # noqa: PLR0917 - a seeding helper read as a table row
    s: Session, node: int, cluster: int, start_h: float, end_h: float, price: float, **kw: Any
) -> None:
    start, end = S + start_h * H, S + end_h * H
    row = {"kind": "instance", "user": "me", "provider": "aws", "region": "us-east-1",
           "gpu_count": 1, "pricing": "on_demand", "billing": "second:60", "closed": True,
           "on_demand_price_per_hour": price, "cluster_name": f"c{cluster}", **kw}  # fmt: skip
    if hasattr(LedgerEntry, "run_started_at"):  # i16-ledger's column (NOT NULL), once merged
        row["run_started_at"] = start
    s.add(LedgerEntry(entry_key=f"n{node}-{start_h}", node_id=node, cluster_id=cluster,
                      price_per_hour=price, started_at=start, ended_at=end, billed_s=end - start,
                      cost_usd=price * (end - start) / H, created_at=start, updated_at=end,
                      **row))  # fmt: skip


def change(  # noqa: PLR0917 - a seeding helper read as a table row
    s: Session, kind: str, entity: int, old: str | None, new: str, at_h: float, reason: str = "",
    actor: str = "worker@host:1",
) -> None:  # fmt: skip
    s.add(StatusChange(entity_kind=kind, entity_id=entity, from_status=old, to_status=new,
                       at=S + at_h * H, actor=actor, reason=reason))  # fmt: skip


def ready(s: Session, node: int, at_h: float) -> None:
    change(s, "node", node, None, "provisioning", at_h - 0.1, "created")
    change(s, "node", node, "provisioning", "ready", at_h, "agent answers")


def outage(s: Session, start_h: float, minutes: float, provider: str = "aws") -> None:
    start, end = S + start_h * H, S + start_h * H + minutes * 60
    s.add(ProviderOutage(provider=provider, region=None, operation="list_instances",
                         started_at=start, last_seen_at=end - 1, ended_at=end, errors=9,
                         last_error="ProviderUnavailable: 503"))  # fmt: skip


def seed(engine: Engine) -> None:
    with session_scope(engine) as s:
        # node 1 (cluster 1, $4/h) lost by the provider at 10 h; replacement node 2 ready at 12 h
        ledger(s, 1, 1, 0, 10, 4.0)
        ready(s, 1, 0)
        change(s, "node", 1, "ready", "terminating", 10, f"{GONE_REASON}")
        ledger(s, 2, 1, 11.5, 100, 4.0)
        ready(s, 2, 12)
        # node 3 (cluster 2, spot $1/h) preempted at 20 h: not a breach
        ledger(s, 3, 2, 0, 20, 1.0, pricing="spot")
        ready(s, 3, 0)
        change(s, "node", 3, "ready", "preempted", 20, "the provider took it back")
        # node 4 (cluster 3, $2/h) stopped by its user at 30 h: not a breach
        ledger(s, 4, 3, 0, 30, 2.0)
        ready(s, 4, 0)
        change(s, "cluster", 3, "succeeded", "stopping", 30, "stop requested", actor="user")
        change(s, "node", 4, "ready", "stopping", 30, "cluster stopping")
        # node 5 (cluster 4, $3/h): its agent unreachable from 70 h to 71 h
        ledger(s, 5, 4, 0, 100, 3.0)
        ready(s, 5, 0)
        change(s, "node", 5, "ready", "lost", 70, "6 agent polls missed in a row")
        change(s, "node", 5, "lost", "ready", 71, "agent answers again")
        # the API: 30 min down at 40 h (only node 2 and node 5 run), 3 min at 60 h (too short)
        outage(s, 40, 30)
        outage(s, 60, 3)
        # another provider, no clause, no breach
        ledger(s, 6, 5, 0, 5, 0.5, provider="sim", region="sim-1")
        ready(s, 6, 0)


def test_breaches_availability_and_credit_to_the_cent(engine: Engine) -> None:
    seed(engine)
    with session_scope(engine) as s:
        view = report(s, CONFIG, month="2026-11", now=NOW)
    kinds = sorted((b["kind"], b["node_id"], round(b["outage_hours"], 4)) for b in view["breaches"])
    assert kinds == [
        ("agent_unreachable", 5, 1.0),
        ("api_outage", 2, 0.5),
        ("api_outage", 5, 0.5),
        ("node_lost", 1, 2.0),
    ]
    aws, sim = view["providers"]
    assert (aws["provider"], aws["region"], sim["provider"]) == ("aws", "us-east-1", "sim")
    # billed 10 + 88.5 + 20 + 30 + 100 = 248.5 h, plus node 1's 2 unbilled outage hours
    assert aws["node_hours"] == pytest.approx(250.5)
    assert aws["outage_hours"] == pytest.approx(2 + 0.5 + 0.5 + 1)
    assert aws["availability_pct"] == pytest.approx(100 * (250.5 - 4) / 250.5)
    assert aws["met"] is False
    # 10 × (4 $/h × 2 h + 4 × 0.5 + 3 × 0.5 + 3 × 1) = $145.00
    assert round(aws["credit_usd"], 2) == 145.00
    assert (sim["availability_pct"], sim["promise_pct"], sim["credit_usd"]) == (100.0, None, 0.0)
    assert round(view["credit_usd"], 2) == 145.00


def test_a_promise_kept_owes_nothing_and_a_down_or_autostop_ends_a_loss(engine: Engine) -> None:
    with session_scope(engine) as s:
        ledger(s, 1, 1, 0, 10, 4.0)
        ready(s, 1, 0)
        change(s, "node", 1, "ready", "lost", 9, "6 agent polls missed in a row")
        change(s, "node", 1, "lost", "terminating", 10, "timed out: lost for 10 min")
        change(s, "cluster", 1, "failed", "terminating", 13, "down requested", actor="user")
        ledger(s, 2, 2, 0, 10, 4.0)  # another, gone at 10 h, its cluster autostopped at 11 h
        ready(s, 2, 0)
        change(s, "node", 2, "ready", "terminating", 10, GONE_REASON)
        change(s, "cluster", 2, "failed", "stopping", 11, "autostop: idle for 60 min")
    lenient = {"sla": {"aws": {"promise": 60, "credit": {"per_outage_hour": 10}}}}
    with session_scope(engine) as s:
        strict = report(s, CONFIG, month="2026-11", now=NOW)
        kept = report(s, lenient, month="2026-11", now=NOW)
    lost = [(b["kind"], b["node_id"], b["outage_hours"]) for b in strict["breaches"]]
    assert lost == [("node_lost", 1, 4.0), ("node_lost", 2, 1.0)]  # 9 h → down at 13 h; 10 → 11
    assert round(strict["credit_usd"], 2) == 200.00  # 10 × 4 $/h × (4 h + 1 h)
    (aws,) = kept["providers"]
    assert aws["availability_pct"] == pytest.approx(100 * 19 / 24)  # 20 billed + 4 unbilled h
    assert (aws["met"], aws["credit_usd"]) == (True, 0.0)
    assert report_month_is_empty(engine)


def report_month_is_empty(engine: Engine) -> bool:
    with session_scope(engine) as s:
        view = report(s, CONFIG, month="2026-10", now=NOW)
    return bool(view["providers"] == [] and view["credit_usd"] == 0.0)


def test_spot_node_gone_is_a_preemption_and_lost_then_preempted_is_not_a_breach(
    engine: Engine,
) -> None:
    with session_scope(engine) as s:
        ledger(s, 1, 1, 0, 10, 1.0, pricing="spot")
        ready(s, 1, 0)
        change(s, "node", 1, "ready", "terminating", 10, GONE_REASON)
        ledger(s, 2, 2, 0, 10, 4.0)
        ready(s, 2, 0)
        change(s, "node", 2, "ready", "lost", 9, "6 agent polls missed in a row")
        change(s, "node", 2, "lost", "preempted", 9.5, "the provider took it back")
    with session_scope(engine) as s:
        view = report(s, CONFIG, month="2026-11", now=NOW)
    assert view["breaches"] == []
    assert view["providers"][0]["availability_pct"] == 100.0


def test_an_api_outage_over_a_price_change_is_one_breach_at_the_first_price(
    engine: Engine,
) -> None:
    with session_scope(engine) as s:
        ledger(s, 1, 1, 0, 10, 4.0)
        ledger(s, 1, 1, 10, 20, 5.0)  # the price changed at 10 h
        ready(s, 1, 0)
        outage(s, 9.5, 60)  # 9.5 h to 10.5 h
    with session_scope(engine) as s:
        view = report(s, CONFIG, month="2026-11", now=NOW)
    (breach,) = view["breaches"]
    assert (breach["kind"], breach["outage_hours"]) == ("api_outage", 1.0)
    assert view["providers"][0]["availability_pct"] == pytest.approx(95.0)
    assert round(view["credit_usd"], 2) == 40.00  # 10 × 4 $/h × 1 h


def test_the_reasons_read_are_the_controllers() -> None:
    """The history's reasons this module recognises are the ones the controller writes."""
    from gpulease.controller import lifecycle, running, timeouts

    assert f'"{GONE_REASON}"' in inspect.getsource(running)
    assert f'f"{AUTOSTOP} ' in inspect.getsource(lifecycle)
    assert 'f"timed out: {rule.why}"' in inspect.getsource(timeouts)


def test_the_config_and_the_month_are_checked() -> None:
    with pytest.raises(UserInputError, match="--month"):
        parse_month("2026-13", NOW)
    with pytest.raises(UserInputError, match="--month"):
        parse_month("nov", NOW)
    with pytest.raises(UserInputError, match="--month"):
        parse_month("9999-12", NOW)
    assert parse_month(None, S + 5) == ("2026-11", S, S + 30 * 24 * H)
    with pytest.raises(UserInputError, match=r"sla\.aws\.promise"):
        clauses({"sla": {"aws": {"promise": 101}}})
    with pytest.raises(UserInputError, match=r"sla\.aws: unknown keys"):
        clauses({"sla": {"aws": {"promis": 99}}})
    assert clauses(CONFIG)["aws"].api_window_s == 300.0


@given(st.integers(1970, 9998), st.integers(1, 12))
def test_every_month_parses_to_its_days(year: int, month: int) -> None:
    label, start, end = parse_month(f"{year:04d}-{month:02d}", NOW)
    first = datetime.fromtimestamp(start, UTC)
    after = datetime.fromtimestamp(end, UTC)
    assert (label, first.day, first.month, after.day) == (f"{year:04d}-{month:02d}", 1, month, 1)
    assert 28 * 86400 <= end - start <= 31 * 86400
