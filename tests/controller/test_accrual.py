"""The cost ledger's accrual in the cluster loop, in virtual time on a real DB: a node bills from
when the provider reports it running until its termination is confirmed, with the provider's
rule; a server down for an hour bills that hour once on its return; a spot price change splits
the row at its instant; a stopped node bills its volumes, and a start begins a new run."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select

from gpulease.clock import Clock, VirtualClock
from gpulease.controller import LoopSettings, Reconciler
from gpulease.providers.base import SupportsPriceHistory, SupportsSpotMarket
from gpulease.state import ClusterStatus, LaunchTarget, session_scope
from gpulease.state.ledger import job_spend
from gpulease.state.models import Cluster, LedgerEntry
from gpulease.wire import RunSpec
from tests.controller.conftest import OWNER, new_cluster
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.controller.test_reconciler import run, run_until, user_sets

C = ClusterStatus


class MarketProvider(FakeProvider, SupportsSpotMarket, SupportsPriceHistory):
    """The provider double with a spot market: ``factors`` [(at, factor)] on the quoted price."""

    def __init__(self, clock: VirtualClock, factors: list[tuple[float, float]]) -> None:
        super().__init__("market")
        self.clock = clock
        self.factors = factors

    def factor(self, at: float) -> float:
        return ([f for t, f in self.factors if t <= at] or [1.0])[-1]

    def spot_available(self, region: str | None, zone: str | None, num_nodes: int) -> bool:
        return True

    def spot_price(
        self, region: str | None, zone: str | None, instance_type: str | None, quoted: float
    ) -> float:
        return quoted * self.factor(self.clock.now())

    @property
    def market_clock(self) -> Clock:
        return self.clock

    def spot_price_changes(
        self,
        region: str | None,
        zone: str | None,
        instance_type: str | None,
        quoted: float,
        *,
        after: float,
        until: float,
    ) -> list[tuple[float, float]]:
        return [(t, quoted * f) for t, f in self.factors if after < t <= until]


def _loop(engine: Engine, provider: FakeProvider, clock: VirtualClock) -> Reconciler:
    return Reconciler(engine, {provider.name: provider}, FakeAgents(), clock=clock, owner=OWNER,
                      settings=LoopSettings(resting_every_s=0.0))  # fmt: skip


def _rows(engine: Engine) -> list[LedgerEntry]:
    with session_scope(engine) as session:
        rows = list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))
        session.expunge_all()
        return rows


def _target(provider: str, pricing: str = "on_demand", price: float = 7.2) -> LaunchTarget:
    return LaunchTarget(provider=provider, region="r1", instance_type="t1", num_nodes=2,
                        pricing=pricing, price_per_hour=price)  # fmt: skip


def test_a_node_bills_from_running_to_confirmed_termination_with_the_minimum(
    engine: Engine, clock: VirtualClock
) -> None:
    provider = FakeProvider()
    provider.billing = "second:60"
    loop = _loop(engine, provider, clock)
    cid = new_cluster(engine, clock, plans=(_target("fake"),))
    run(loop, clock)  # launched: the instances run at once
    started = clock.now()
    run(loop, clock)  # the pass that lists them RUNNING opens their rows
    rows = _rows(engine)
    assert len(rows) == 2 and {r.started_at for r in rows} == {started}
    assert all(r.billed_s == 0.0 and r.price_per_hour == 3.6 for r in rows)  # 7.2 for 2 nodes
    run_until(loop, clock, engine, cid, C.RUNNING)
    user_sets(engine, cid, C.TERMINATING, clock)
    run_until(loop, clock, engine, cid, C.TERMINATED)
    rows = _rows(engine)
    assert all(r.closed for r in rows)
    (end,) = {r.ended_at for r in rows}
    assert end - started < 60  # a short run: billed the minimum
    assert all(r.billed_s == 60.0 and r.cost_usd == pytest.approx(0.06) for r in rows)
    assert all(r.billing == "second:60" and r.cluster_name == "c1" for r in rows)
    run(loop, clock, passes=3)
    assert [(r.ended_at, r.cost_usd) for r in _rows(engine)] == [
        (r.ended_at, r.cost_usd) for r in rows
    ]


def test_a_server_down_for_an_hour_bills_it_once_on_return(
    engine: Engine, clock: VirtualClock
) -> None:
    provider = FakeProvider()
    loop = _loop(engine, provider, clock)
    cid = new_cluster(engine, clock, plans=(_target("fake"),))
    run_until(loop, clock, engine, cid, C.RUNNING)
    loop.run_pass()
    before = _rows(engine)
    clock.advance(3600)  # no pass for an hour
    fresh = _loop(engine, provider, clock)  # a restarted server
    fresh.run_pass()
    fresh.run_pass()  # the same instant again: nothing more
    after = _rows(engine)
    assert [r.id for r in after] == [r.id for r in before]
    for old, new in zip(before, after, strict=True):
        assert new.ended_at == clock.now()
        assert new.billed_s - old.billed_s == pytest.approx(3600.0)
        assert new.cost_usd == pytest.approx(new.billed_s * 3.6 / 3600)


def test_a_spot_price_change_closes_the_row_at_its_instant(
    engine: Engine, clock: VirtualClock
) -> None:
    change_at = clock.now() + 1800.5
    provider = MarketProvider(clock, [(change_at, 2.0)])
    loop = _loop(engine, provider, clock)
    cid = new_cluster(engine, clock, plans=(_target("market", "spot", 2.0),))
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        row.job_id = 41
    run_until(loop, clock, engine, cid, C.RUNNING)
    clock.advance(3600)  # past the change, with no pass in between
    run(loop, clock)
    rows = _rows(engine)
    assert len(rows) == 4
    first, second = [r for r in rows if r.node_id == rows[0].node_id]
    assert first.closed and first.ended_at == change_at and first.price_per_hour == 1.0
    assert second.started_at == change_at and second.price_per_hour == 2.0 and not second.closed
    assert second.run_started_at == first.started_at
    expected = sum((r.ended_at - r.started_at) * r.price_per_hour / 3600 for r in rows)
    with session_scope(engine) as session:
        assert job_spend(session, 41) == pytest.approx(expected)


def test_a_stopped_node_bills_its_volumes_and_a_start_is_a_new_run(
    engine: Engine, clock: VirtualClock
) -> None:
    provider = FakeProvider()
    provider.billing = "second:60"
    provider.volume_usd_per_gb_month = 0.073
    loop = _loop(engine, provider, clock)
    run_spec = RunSpec(run="python train.py", workdir="/src", disk_gb=100)
    target = LaunchTarget(provider="fake", region="r1", instance_type="t1", price_per_hour=1.0)
    cid = new_cluster(engine, clock, plans=(target,), run=run_spec)
    run_until(loop, clock, engine, cid, C.RUNNING)
    user_sets(engine, cid, C.STOPPING, clock)
    run_until(loop, clock, engine, cid, C.STOPPED)
    run(loop, clock)
    clock.advance(7300)
    run(loop, clock)
    volume = next(r for r in _rows(engine) if r.kind == "volume")
    assert volume.quantity == 100 and volume.price_per_hour == pytest.approx(0.01)
    assert volume.cost_usd == pytest.approx((volume.ended_at - volume.started_at) * 0.01 / 3600)
    user_sets(engine, cid, C.STARTING, clock)
    run_until(loop, clock, engine, cid, C.RUNNING)
    kinds = [(r.kind, r.closed) for r in _rows(engine)]
    assert kinds == [("instance", True), ("volume", True), ("instance", False)]
    restarted = _rows(engine)[-1]
    assert restarted.run_started_at == restarted.started_at
    assert restarted.billed_s == 60.0  # a new run: the minimum again
