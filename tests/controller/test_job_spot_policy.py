"""The managed-jobs loop follows the ``gpulease`` spot policy (the code ``spot-sim`` evaluates)
for ``use_spot: auto`` with a deadline and an expected run time: spot when it is obtainable and
the deadline has slack, waiting when it is not obtainable and slack is left, on-demand when the
deadline needs it. Real SQLite; the provider double sells a spot market whose availability the
test sets, on the test's virtual clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from gpulease.clock import Clock, VirtualClock
from gpulease.controller.job_loop import JobReconciler
from gpulease.controller.job_rules import JobConfig
from gpulease.providers.base import SupportsSpotMarket
from gpulease.state import JobStatus
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.controller.test_job_rules import OD, OWNER, SPOT, job_row, make_doc, new_job

HOUR = 3600.0


class MarketProvider(FakeProvider, SupportsSpotMarket):
    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(SPOT.provider)
        self.clock = clock
        self.spot_is_available = True

    def spot_available(self, region: str | None, zone: str | None, num_nodes: int) -> bool | None:
        return self.spot_is_available

    def spot_price(
        self, region: str | None, zone: str | None, instance_type: str | None, quoted: float
    ) -> float | None:
        return quoted

    @property
    def market_clock(self) -> Clock:
        return self.clock


@pytest.fixture
def market(clock: VirtualClock) -> Iterator[MarketProvider]:
    yield MarketProvider(clock)


def _loop(engine: Engine, market: MarketProvider, clock: VirtualClock) -> JobReconciler:
    return JobReconciler(engine, {market.name: market}, FakeAgents(), clock=clock, owner=OWNER,
                         config=JobConfig())  # fmt: skip


def _auto(job_hours: float, deadline_hours: float) -> dict[str, object]:
    return {"use_spot": "auto", "job_s": job_hours * HOUR, "deadline_s": deadline_hours * HOUR}


def test_spot_with_slack_when_spot_is_obtainable(
    engine: Engine, market: MarketProvider, clock: VirtualClock
) -> None:
    assert SPOT.provider == OD.provider
    jid = new_job(engine, clock, make_doc(**_auto(8, 20)))
    assert _loop(engine, market, clock).step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.pricing) == (JobStatus.STARTING, "spot")


def test_waits_for_spot_while_the_deadline_has_slack(
    engine: Engine, market: MarketProvider, clock: VirtualClock
) -> None:
    market.spot_is_available = False
    jid = new_job(engine, clock, make_doc(**_auto(8, 20)))
    loop = _loop(engine, market, clock)
    assert loop.step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.attempt) == (JobStatus.RECOVERING, 0)

    market.spot_is_available = True
    clock.advance(600.0)  # the next policy tick sees spot
    assert loop.step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.pricing, row.attempt) == (JobStatus.STARTING, "spot", 1)


def test_on_demand_when_the_deadline_needs_it(
    engine: Engine, market: MarketProvider, clock: VirtualClock
) -> None:
    market.spot_is_available = False
    jid = new_job(engine, clock, make_doc(**_auto(9.8, 10)))
    assert _loop(engine, market, clock).step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.pricing) == (JobStatus.STARTING, "on_demand")
