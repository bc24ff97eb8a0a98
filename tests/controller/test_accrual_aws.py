"""The ledger's AWS spot rows on a real moto server process: a spot node launched through the
cluster loop opens its row at the price EC2's spot price history gives (moto's one entry,
0.00001 $/h), not at the plan's quote, and the history is read once per interval however many
passes run. (A price *change* cannot be injected into moto: the split at a learned change is
proven on the parsed history in tests/providers/test_aws_spot_history.py, and the split itself
on the provider double in test_accrual.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import LoopSettings, Reconciler
from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.aws.spot_history import REFRESH_EVERY_S
from gpulease.server.provider_calls import ProviderCalls, count_calls
from gpulease.state import LaunchTarget
from tests.awsfixtures import aws_env, ec2_env, moto_server  # noqa: F401 - fixtures
from tests.controller.conftest import OWNER, new_cluster
from tests.controller.doubles import FakeAgents
from tests.controller.test_accrual import _rows
from tests.controller.test_reconciler import run

QUOTE = 0.096


@pytest.fixture
def aws(ec2_env: str, tmp_path: Path, clock: VirtualClock) -> Iterator[AwsProvider]:  # noqa: F811
    made = AwsProvider(tmp_path / "aws", AwsSettings(tunnels=False), retry_base=0.01,
                       clock=clock)  # fmt: skip
    yield made
    made.close()


def test_an_aws_spot_row_bills_the_history_price(
    engine: Engine, clock: VirtualClock, aws: AwsProvider
) -> None:
    calls = ProviderCalls()
    count_calls({"aws": aws}, calls)
    loop = Reconciler(engine, {"aws": aws}, FakeAgents(), clock=clock, owner=OWNER,
                      settings=LoopSettings(resting_every_s=0.0))  # fmt: skip
    plan = LaunchTarget(provider="aws", region="us-east-1", zone="us-east-1a",
                        instance_type="m5.large", pricing="spot", price_per_hour=QUOTE)  # fmt: skip
    new_cluster(engine, clock, plans=(plan,))
    run(loop, clock, passes=12, step=10.0)
    (row,) = _rows(engine)
    assert row.kind == "instance" and row.pricing == "spot" and not row.closed
    assert row.price_per_hour == pytest.approx(0.00001) and row.quoted_per_hour == QUOTE
    assert row.ended_at > row.started_at
    assert calls.calls()[("aws", "spot_price_history")] == 1  # 12 passes, one read
    clock.advance(REFRESH_EVERY_S)
    run(loop, clock, passes=2, step=10.0)
    assert calls.calls()[("aws", "spot_price_history")] == 2
    (same,) = _rows(engine)  # the same entry again: no split
    assert same.id == row.id and same.price_per_hour == row.price_per_hour
