"""``gpulease sla`` as a user runs it: the real entry point in subprocesses against a real server
(started on first use) over a seeded history in the home's state DB (tests/cost/test_sla.py's),
and a bad ``--month`` exiting 2 before any server is asked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.state import open_database
from tests.cli.conftest import Cli
from tests.cost.test_sla import seed

CONFIG = """\
sla:
  aws:
    promise: 99.9
    api_window_minutes: 5
    credit: {per_outage_hour: 10}
"""


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(CONFIG)
    yield cli
    cli("server", "stop")


def test_sla_report_from_the_server(user: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_database(f"sqlite:///{user.home / 'state.db'}")
    seed(engine)
    engine.dispose()
    out = user("sla", "--month", "2026-11", "--json", check=True)
    view = json.loads(out.stdout)
    assert view["month"] == "2026-11"
    assert [(p["provider"], p["met"]) for p in view["providers"]] == [("aws", False), ("sim", True)]
    assert round(view["credit_usd"], 2) == 145.00
    assert {b["kind"] for b in view["breaches"]} == {"node_lost", "agent_unreachable", "api_outage"}
    sdk_answers(user.home, monkeypatch)
    text = user("sla", "--month", "2026-11", check=True).stdout
    assert "98.403%" in text and "99.9% (missed)" in text and "credit owed: $145.00" in text
    assert "node_lost" in text and "c1" in text


def sdk_answers(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's ``Client.sla`` against the same running server, a bad month a 422."""
    from gpulease.client import InvalidRequest, connect

    monkeypatch.setenv("GPULEASE_HOME", str(home))
    with connect(autostart=False) as api:
        assert round(api.sla("2026-11")["credit_usd"], 2) == 145.00
        assert api.sla("2026-10")["providers"] == []
        with pytest.raises(InvalidRequest, match="--month"):
            api.sla("2026-13")


def test_a_bad_month_exits_2_without_a_server(cli: Cli) -> None:
    result = cli("sla", "--month", "2026-13")
    assert result.returncode == 2, result.stderr
    assert "--month" in result.stderr and "Traceback" not in result.stderr
    assert not (cli.home / "server.json").exists()
