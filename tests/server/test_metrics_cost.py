"""``gpulease_cost_accrued_usd_total`` on ``GET /metrics`` (in process, a real SQLite DB): the
ledger's dollars by cluster, job and offer, rows written through ``state/ledger.py``."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from gpulease.state import session_scope
from gpulease.state.ledger import EntryFacts, advance, change_price, open_entry
from tests.server.test_metrics import _client, _scrape, _value

T0 = 1_700_000_000.0


def _facts(subject: str, **kw: object) -> EntryFacts:
    values: dict[str, object] = {
        "kind": "instance", "subject": subject, "user": "ann", "provider": "sim",
        "pricing": "spot", "price_per_hour": 3.6, "billing": "second", "cluster_name": "a-1-1",
        "job_id": 1, "region": "us-east-1", "instance_type": "g4dn.xlarge",
    }  # fmt: skip
    values.update(kw)
    return EntryFacts(**values)  # type: ignore[arg-type]


def test_the_accrued_dollars_are_the_ledgers(engine: Engine) -> None:
    with session_scope(engine) as session:
        spot = open_entry(session, _facts("1"), started_at=T0, now=T0)
        dearer = change_price(session, spot, T0 + 100, 7.2, now=T0 + 100)
        advance(dearer, T0 + 200, now=T0 + 200)  # 100 s at 3.6 + 100 s at 7.2 = $0.30
        plain = _facts("2", pricing="on_demand", job_id=None, cluster_name="dev", region=None)
        advance(open_entry(session, plain, started_at=T0, now=T0), T0 + 3600, now=T0 + 3600)
    samples = _scrape(_client(engine))
    name = "gpulease_cost_accrued_usd_total"
    job = _value(samples, name, cluster="a-1-1", job_id="1", provider="sim",
                 region="us-east-1", instance_type="g4dn.xlarge", spot="true")  # fmt: skip
    assert job == pytest.approx(0.30)
    dev = _value(samples, name, cluster="dev", job_id="", provider="sim", region="",
                 instance_type="g4dn.xlarge", spot="false")  # fmt: skip
    assert dev == pytest.approx(3.6)
