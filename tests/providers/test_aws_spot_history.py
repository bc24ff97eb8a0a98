"""EC2 spot price history for the ledger (:mod:`gpulease.providers.aws.spot_history`): the
window rule (a change at its instant, or when learned if the row had passed it), the
throttle and the backoff on errors, and the real API call on a moto server process. moto
answers DescribeSpotPriceHistory with one fixed entry (price 0.00001, 2006-01-02) and has no
way to add one, so a *new* entry is exercised on the parsed form only."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulease.clock import VirtualClock
from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.spot_history import (
    BACKOFF_CAP_S,
    REFRESH_EVERY_S,
    PricePoint,
    SpotHistory,
    changes_in,
    parse_history,
    price_at,
)
from gpulease.providers.base import LaunchRequest, ProviderUnavailable
from gpulease.server.provider_calls import ProviderCalls, count_calls
from tests.awsfixtures import aws_env, ec2_env, moto_server  # noqa: F401 - fixtures

MOTO_PRICE = 0.00001
_QUICK = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_a_change_is_at_its_instant_when_known_in_time_else_when_learned() -> None:
    points = [PricePoint(100.0, 1.0, 50.0), PricePoint(200.0, 2.0, 150.0),
              PricePoint(300.0, 3.0, 400.0), PricePoint(320.0, 3.5, 400.0)]  # fmt: skip
    assert changes_in(points, after=100.0, until=250.0) == [(200.0, 2.0)]
    # 300 and 320 were learned at 400, after the row had passed them: one change, at 400
    assert changes_in(points, after=250.0, until=350.0) == []
    assert changes_in(points, after=350.0, until=500.0) == [(400.0, 3.5)]
    # a row that had not passed them yet (a server down meanwhile) splits at their instants
    assert changes_in(points, after=250.0, until=500.0) == [(300.0, 3.0), (320.0, 3.5)]
    assert price_at(points, 399.0) == 2.0 and price_at(points, 400.0) == 3.5


@_QUICK
@given(st.lists(st.tuples(st.floats(0, 1e4), st.floats(0, 10), st.floats(0, 1e4)), max_size=8),
       st.lists(st.floats(0, 1.2e4), min_size=2, max_size=6))  # fmt: skip
def test_consecutive_windows_see_each_learned_point_once(
    raw: list[tuple[float, float, float]], cuts: list[float]
) -> None:
    points = [PricePoint(at, price, max(at, learned)) for at, price, learned in raw]
    cuts = sorted(cuts)
    seen = [c for a, b in itertools.pairwise(cuts)
            for c in changes_in(points, after=a, until=b)]  # fmt: skip
    assert all(cuts[0] < at <= cuts[-1] for at, _ in seen)
    assert len({at for at, _ in seen}) == len(seen)
    if seen:  # the last price seen is the one in force at the end
        assert seen[-1][1] == price_at(points, cuts[-1])


@_QUICK
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["SpotPrice", "Timestamp", "ProductDescription"]),
            st.one_of(st.text(max_size=6), st.floats(), st.integers()),
        ),
        max_size=4,
    )
)
def test_parse_history_never_raises(entries: list[dict[str, Any]]) -> None:
    for point in parse_history(entries, learned_at=1.0):
        assert point.price >= 0 and point.learned_at == 1.0


def test_the_history_is_read_once_per_interval_and_backs_off_on_errors() -> None:
    answers: list[Any] = [ProviderUnavailable("EC2 throttled", delay=0.0),
                          [{"SpotPrice": "1.5", "Timestamp": 10.0}],
                          [{"SpotPrice": "1.5", "Timestamp": 10.0},
                           {"SpotPrice": "1.7", "Timestamp": 500.0}]]  # fmt: skip
    asked: list[float] = []

    def fetch(key: tuple[str, str, str], since: float) -> list[Mapping[str, Any]]:
        asked.append(since)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    history = SpotHistory(fetch, rng=random.Random(3))
    key = ("us-east-1", "us-east-1a", "p4d.24xlarge")
    assert history.points(key, 0.0) == []  # failed: asked again only after a backoff
    assert history.points(key, 0.5) == [] and len(asked) == 1
    assert history.points(key, 4000.0) == [PricePoint(10.0, 1.5, 4000.0)]
    assert history.points(key, 4000.0 + REFRESH_EVERY_S - 1) and len(asked) == 2
    last = history.points(key, 4000.0 + REFRESH_EVERY_S)
    assert last == [PricePoint(10.0, 1.5, 4000.0), PricePoint(500.0, 1.7, 4300.0)]
    assert asked[2] == 4000.0  # incremental: from the previous read


@pytest.fixture
def provider(ec2_env: str, tmp_path: Path) -> Iterator[AwsProvider]:  # noqa: F811 - fixture
    made = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False), retry_base=0.01,
                       clock=VirtualClock())  # fmt: skip
    yield made
    made.close()


def test_a_spot_node_on_moto_gets_its_price_from_the_history_counted(
    provider: AwsProvider,
) -> None:
    calls = ProviderCalls()
    count_calls({"aws": provider}, calls)
    request = LaunchRequest("req-h", "c1", "gl-h", spot=True, zone="us-east-1a",
                            instance_type="m5.large")  # fmt: skip
    (inst,) = provider.launch(request)
    assert inst.spot
    clock = provider.clock
    start = clock.now()
    # moto's one entry (2006) is learned now: the row passed its instant, so the change is now
    changes = provider.spot_price_changes("us-east-1", "us-east-1a", "m5.large", 0.096,
                                          after=start - 1.0, until=start)  # fmt: skip
    assert changes == [(start, MOTO_PRICE)]
    assert calls.calls()[("aws", "spot_price_history")] == 1
    assert isinstance(clock, VirtualClock)
    clock.advance(REFRESH_EVERY_S - 1)
    later = provider.spot_price_changes("us-east-1", "us-east-1a", "m5.large", 0.096,
                                        after=start, until=clock.now())  # fmt: skip
    assert later == [] and calls.calls()[("aws", "spot_price_history")] == 1
    clock.advance(1)
    provider.spot_price_changes("us-east-1", "us-east-1a", "m5.large", 0.096,
                                after=clock.now() - 1, until=clock.now())  # fmt: skip
    assert calls.calls()[("aws", "spot_price_history")] == 2  # the same entry: no new change
    assert provider.spot_price_changes("us-east-1", None, "m5.large", 0.096,
                                       after=0.0, until=clock.now()) == []  # fmt: skip


def test_a_throttled_read_is_one_try_counted_and_asked_again_after_a_backoff(
    provider: AwsProvider,
) -> None:
    from botocore.exceptions import ClientError

    calls = ProviderCalls()
    count_calls({"aws": provider}, calls)
    sent: list[int] = []

    def throttle(**_: Any) -> None:
        sent.append(1)
        if len(sent) == 1:
            raise ClientError({"Error": {"Code": "RequestLimitExceeded", "Message": "slow"}},
                              "DescribeSpotPriceHistory")  # fmt: skip

    events = provider.ec2.client("us-east-1").meta.events
    events.register("before-call.ec2.DescribeSpotPriceHistory", throttle)
    clock = provider.clock
    assert isinstance(clock, VirtualClock)
    now = clock.now()
    assert provider.spot_price_changes("us-east-1", "us-east-1b", "m5.large", 0.096,
                                       after=now - 1, until=now) == []  # fmt: skip
    assert len(sent) == 1  # one try, no sleep inside the pass
    assert calls.errors() == {("aws", "spot_price_history", "RequestLimitExceeded"): 1}
    provider.spot_price_changes("us-east-1", "us-east-1b", "m5.large", 0.096,
                                after=now, until=now)  # fmt: skip
    assert len(sent) == 1  # backing off
    clock.advance(BACKOFF_CAP_S)
    later = clock.now()
    changes = provider.spot_price_changes("us-east-1", "us-east-1b", "m5.large", 0.096,
                                          after=now, until=later)  # fmt: skip
    assert len(sent) == 2 and changes == [(later, MOTO_PRICE)]
