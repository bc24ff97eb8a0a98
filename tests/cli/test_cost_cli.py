"""``gpulease cost`` as a user runs it: the real entry point in subprocesses, the real server it
starts on first use (``GET /v1/cost``), over ledger rows seeded into the home's state DB through
the real schema; the SDK's ``Client.cost`` against the same server; bad options exit 2 naming
the option without a server."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpulease.cli.cost_cmd import cost
from gpulease.client import Client
from gpulease.client.errors import InvalidRequest
from gpulease.client.server import read_info
from gpulease.errors import UserInputError
from gpulease.state import make_engine, upgrade
from tests.cli.conftest import Cli
from tests.cost.seed import entry, insert_rows

H, D = 3600.0, 86400.0
NOV = datetime(2026, 11, 1, tzinfo=UTC).timestamp()


@pytest.fixture
def user(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    monkeypatch.delenv("GPULEASE_DB_URL", raising=False)
    cli.home.mkdir(parents=True, exist_ok=True)
    engine = make_engine(f"sqlite:///{cli.home / 'state.db'}")
    try:
        upgrade(engine)
        spot = dict(pricing="spot", on_demand_price_per_hour=10.0, cluster_name="b",
                    provider="sim", region="eu-west-1")  # fmt: skip
        insert_rows(engine, [
            entry(NOV - 12 * H, NOV + 12 * H, 2.0),  # half in November: $24
            entry(NOV + 2 * D, NOV + 2 * D + 3 * H, 4.0, **spot),  # $12, saves $18
            entry(NOV + 3 * D, NOV + 3 * D + H, 1.0, kind="storage", gpu_count=0),
        ])  # fmt: skip
    finally:
        engine.dispose()
    yield cli
    cli("server", "stop")


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def test_cost_json_csv_and_table_from_the_server(user: Cli) -> None:
    report: dict[str, Any] = json.loads(_ok(user("cost", "--month", "2026-11", "--json")))
    assert report["period"]["label"] == "month 2026-11"
    assert report["total"]["cost_usd"] == pytest.approx(37.0)
    assert report["total"]["by_kind"] == {"instance": 36.0, "storage": 1.0}
    assert report["spot_savings"]["savings_usd"] == pytest.approx(18.0)
    assert [r["key"] for r in report["breakdown"]] == ["2026-11-01", "2026-11-03", "2026-11-04"]
    assert set(report["forecast"]) >= {"month", "so_far_usd", "burn_usd_per_hour", "forecast_usd"}

    rows = list(csv.reader(io.StringIO(_ok(user("cost", "--month", "2026-11", "--by",
                                                   "provider", "--csv")))))  # fmt: skip
    assert rows[0] == ["provider", "cost_usd", "billed_hours", "gpu_hours", "entries",
                       "spot_savings_usd"]  # fmt: skip
    assert rows[1:] == [["aws", "25.000000", "13.0000", "96.0000", "2", "0.000000"],
                        ["sim", "12.000000", "3.0000", "24.0000", "1", "18.000000"]]  # fmt: skip

    table = _ok(user("cost", "--month", "2026-11", "--by", "cluster"))
    assert "Cost month 2026-11" in table
    assert "$37.00" in table and "$18.00" in table  # the total and the spot saving, in cents
    assert "spot savings: $18.00 (60.0 %) against $30.00 on demand" in table
    assert "forecast " in table

    info = read_info(user.home)
    assert info is not None
    token = (user.home / "server.token").read_text().strip()
    with Client(info.url, token) as api:
        assert api.cost(month="2026-11", by="pricing")["breakdown"][0]["key"] == "on_demand"
        assert api.cost(since="1d")["period"]["label"] == "since 1d"
        with pytest.raises(InvalidRequest, match="--by"):
            api.cost(by="week")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"since": "30x"}, "--since"),
        ({"month": "2026-13"}, "--month"),
        ({"since": "7d", "month": "2026-11"}, "--since and --month"),
        ({"as_json": True, "as_csv": True}, "--json and --csv"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], named: str) -> None:
    with pytest.raises(UserInputError, match=f"^{named}"):
        cost(**options)  # checked before any server is asked (or started)


def test_a_bad_option_exits_2_without_a_server(cli: Cli) -> None:
    result = cli("cost", "--by", "week")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: --by: expected one of day, cluster, job")
    assert "Traceback" not in result.stderr
    assert read_info(cli.home) is None  # refused before any server was started
