"""``gpulease audit`` as a user runs it: the real entry point in subprocesses against a real
server (started on first use) whose state DB holds the seeded history of
tests/cost/audit_history.py (written before the server starts, relative to the real clock) and
whose catalog is the five-offer test catalog in the home's catalog cache."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from gpulease.client import InvalidRequest, connect
from gpulease.state import make_engine, upgrade
from tests.cli.conftest import Cli
from tests.cost.audit_history import seed_findings, write_catalog
from tests.cost.test_audit import EXPECTED


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    cli.home.mkdir(parents=True, exist_ok=True)
    now = time.time()
    engine = make_engine(f"sqlite:///{cli.home / 'state.db'}")
    try:
        upgrade(engine)
        seed_findings(engine, now)
    finally:
        engine.dispose()
    (cli.home / "catalog").mkdir()
    write_catalog(cli.home / "catalog" / "offers.csv", age_days=45, now=now)
    yield cli
    cli("server", "stop")


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stdout


def test_audit_json_text_and_sdk_against_a_real_server(
    user: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = json.loads(_ok(user("audit", "--json")))
    assert set(view) == {"since", "until", "spend_usd", "findings", "total_usd", "notes"}
    assert view["until"] - view["since"] == pytest.approx(90 * 86400)
    assert [f["kind"] for f in view["findings"]] == list(EXPECTED)
    for finding in view["findings"]:
        assert set(finding) == {"kind", "title", "dollars", "action", "evidence"}
        # the period moved by the seconds between seeding and asking: cents at most
        assert finding["dollars"] == pytest.approx(EXPECTED[finding["kind"]], abs=0.05)
    text = _ok(user("audit", "--since", "6d"))
    lines = text.splitlines()
    assert lines[0].startswith("audit of the last 6 days")
    assert "left-b: billed 96.0 h after its task ended; no autostop" in text
    assert "action: gpulease down left-b" in text
    assert "idle-a" not in text  # ten days ago
    # the SDK, on the server the CLI started; a bad since is the server's 422 naming it
    monkeypatch.setenv("GPULEASE_HOME", str(user.home))
    with connect() as api:
        month = api.audit("30d")
        with pytest.raises(InvalidRequest, match="since"):
            api.audit("soon")
    kinds = [f["kind"] for f in month["findings"]]
    assert kinds[:2] == ["commitment", "left_up"] and "spot_slack" not in kinds  # 50 days ago


@pytest.mark.parametrize("since", ["soon", "0d"])
def test_a_bad_since_exits_2_naming_it(cli: Cli, since: str) -> None:
    result = cli("audit", "--since", since, "--json")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: --since:") and "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (cli.home / "server.json").exists()  # checked before a server is started
