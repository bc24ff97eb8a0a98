"""The budget rules (pure) and the budgets loop over a real DB with an injected clock: warn once
per period, the limit's event, ``stop`` / ``down`` move the scope's running clusters, a managed
job is asked to stop, and ``block``'s launch guard."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.cost.budgets import Budget
from gpulease.cost.enforce import (
    BudgetSnapshot,
    ClusterRef,
    Exceeded,
    JobRef,
    StopCluster,
    StopJob,
    Warn,
    decide_budget,
    launch_refusal,
)
from gpulease.server.budget_loop import BudgetLoop, OverBudget, budget_events
from gpulease.state import (
    ClusterStatus,
    LaunchTarget,
    create_cluster,
    get_cluster,
    history,
    session_scope,
    set_status,
)
from tests.cost.ledger_rows import seed_row

NOW = dt.datetime(2026, 12, 3, 12, tzinfo=dt.UTC).timestamp()
MONTH = dt.datetime(2026, 12, 1, tzinfo=dt.UTC).timestamp()


def _budget(action: str = "block", limit: float = 500.0, **scope: object) -> Budget:
    return Budget.model_validate(
        {
            "name": "team-monthly",
            "period": "month",
            "limit": limit,
            "action": action,
            "scope": scope,
        }
    )


def _snap(spend: float, action: str = "stop", **kw: object) -> BudgetSnapshot:
    return BudgetSnapshot(_budget(action), NOW, "2026-12", spend, **kw)  # type: ignore[arg-type]


def test_below_warn_at_nothing_happens_and_past_it_one_warning() -> None:
    assert decide_budget(_snap(399.0)) == []
    (warn,) = decide_budget(_snap(400.0))
    assert isinstance(warn, Warn)
    assert "budget team-monthly: $400.00 of $500.00 (80 %" in warn.message
    assert decide_budget(_snap(450.0, recorded=frozenset({"warn"}))) == []


def test_at_the_limit_stop_acts_on_running_clusters_and_jobs() -> None:
    clusters = (
        ClusterRef(1, "a", "running"),
        ClusterRef(2, "b", "provisioning"),
        ClusterRef(3, "c", "running", stoppable=False),
    )
    actions = decide_budget(_snap(512.30, clusters=clusters, jobs=(JobRef(7, "j"),)))
    reason = "budget team-monthly: $512.30 of $500.00"
    assert [type(a) for a in actions[:2]] == [Warn, Exceeded]
    assert actions[2:] == [StopCluster(1, "a", reason, down=False), StopJob(7, "j", reason)]
    down = decide_budget(
        _snap(512.30, "down", clusters=clusters, recorded=frozenset({"warn", "exceeded"}))
    )
    assert [a.id for a in down if isinstance(a, StopCluster)] == [1, 2, 3]
    assert all(a.down for a in down if isinstance(a, StopCluster))
    assert decide_budget(_snap(600, "block", recorded=frozenset({"warn", "exceeded"}))) == []


def test_block_refuses_at_the_limit_or_when_the_estimate_would_pass_it() -> None:
    budget = _budget()
    assert launch_refusal(budget, 100.0, None) is None
    assert launch_refusal(budget, 100.0, 399.0) is None
    over = launch_refusal(budget, 100.0, 401.0)
    assert over is not None and "estimated at $401.00" in over
    full = launch_refusal(budget, 500.0, None)
    assert full is not None
    assert "budget team-monthly (month) has spent $500.00 of its $500.00 limit" in full
    assert launch_refusal(_budget("stop"), 900.0, None) is None  # only block refuses


def _cluster(engine: Engine, name: str, status: ClusterStatus, provider: str = "local") -> int:
    target = LaunchTarget(provider=provider, instance_type="local-gpu", price_per_hour=1.0)
    with session_scope(engine) as session:
        cluster, _ = create_cluster(
            session,
            name=name,
            target=target,
            task={"spec": {"name": name}},
            owner="o",
            actor="test",
            now=NOW,
        )
        path = [ClusterStatus.PROVISIONING, ClusterStatus.SETTING_UP, ClusterStatus.RUNNING]
        for to in path[: path.index(status) + 1]:
            assert set_status(session, cluster, to, actor="test", reason="test", now=NOW)
        return cluster.id


def _loop(engine: Engine, budget: Budget, clock: VirtualClock, **kw: object) -> BudgetLoop:
    return BudgetLoop(engine, [budget], clock=clock, user="alice", **kw)  # type: ignore[arg-type]


def test_the_loop_warns_once_per_period_and_stops_the_scope(engine: Engine) -> None:
    clock = VirtualClock(NOW)
    seed_row(engine, started_at=MONTH + 3600, ended_at=MONTH + 7200, cost_usd=420.0)
    running = _cluster(engine, "a", ClusterStatus.RUNNING)
    elsewhere = _cluster(engine, "b", ClusterStatus.RUNNING, provider="aws")
    stopped_jobs: list[tuple[int, str]] = []
    loop = _loop(
        engine,
        _budget("stop", providers=["local"]),
        clock,
        stop_job=lambda job, why: stopped_jobs.append((job, why)) is None,
    )
    assert loop.run_pass() is True  # the warning
    assert loop.run_pass() is False  # once per period
    seed_row(engine, started_at=MONTH + 7200, ended_at=MONTH + 9000, cost_usd=92.30)
    assert loop.run_pass() is True
    with session_scope(engine) as session:
        events = [(e.to_status, e.reason) for e in budget_events(session, loop.budgets[0])]
        a, b = get_cluster(session, running), get_cluster(session, elsewhere)
        assert a is not None and b is not None
        assert (a.status, b.status) == (ClusterStatus.STOPPING, ClusterStatus.RUNNING)
        last = history(session, a)[-1]
        assert (last.actor, last.reason) == ("budget", "budget team-monthly: $512.30 of $500.00")
    assert [e[0] for e in events] == ["warn:2026-12", "exceeded:2026-12"]
    assert "$420.00 of $500.00 (84 %" in events[0][1]
    assert loop.run_pass() is False  # nothing left to do
    clock.advance(31 * 86400)  # next month: a fresh period, spend 0
    assert loop.states()[0].spend == 0.0


def test_the_guard_refuses_by_name_unless_over_budget(engine: Engine) -> None:
    clock = VirtualClock(NOW)
    seed_row(engine, started_at=MONTH, ended_at=MONTH + 60, cost_usd=500.0)
    loop = _loop(engine, _budget("block", task="train*"), clock)
    with pytest.raises(OverBudget, match=r"budget team-monthly .* \$500\.00 of its \$500\.00"):
        loop.check_launch(task_name="train-1", providers=["local"], estimate=None)
    loop.check_launch(task_name="train-1", providers=["local"], estimate=None, over_budget=True)
    loop.check_launch(task_name="eval", providers=["local"], estimate=None)  # out of scope


def test_metrics_show_each_budget(engine: Engine) -> None:
    from prometheus_client import generate_latest

    from gpulease.server.metrics import ControlPlaneCollector, metrics_registry

    seed_row(engine, started_at=MONTH, ended_at=MONTH + 60, cost_usd=125.0)
    loop = _loop(engine, _budget("block"), VirtualClock(NOW))
    text = generate_latest(metrics_registry(ControlPlaneCollector(engine, budgets=loop))).decode()
    assert 'gpulease_budget_spend_usd{budget="team-monthly"} 125.0' in text
    assert 'gpulease_budget_limit_usd{budget="team-monthly"} 500.0' in text
    assert 'gpulease_budget_warn_ratio{budget="team-monthly"} 0.8' in text
    assert (
        loop.states()[0].view()["line"] == "team-monthly (month): $125.00 / $500.00 (25 %), block"
    )
