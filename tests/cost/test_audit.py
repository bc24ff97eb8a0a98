"""The audit on a seeded history (tests/cost/audit_history.py, SQLite through the real schema,
an injected clock): each finding appears once with its hand-computed dollars, ranked; a clean
history has none. The oversized-GPU finding asks the real optimizer (the server's rightsizer)
over a five-offer catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.cost.audit import parse_since
from gpulease.errors import UserInputError
from gpulease.server.audit import AuditService
from tests.cost.audit_history import NOW, new_engine, seed_clean, seed_findings, write_catalog

# kind -> the dollars, by hand (see audit_history.seed_findings)
EXPECTED = {
    # 2,160 h (90 days) on demand at $0.70 against the catalog's 1-year $0.42: 2160 × 0.28
    "commitment": 604.80,
    # billed 96 h at $0.50/h after the task succeeded
    "left_up": 48.00,
    # 10 h × ($4.00 on the A100-80GB − $0.50 on the T4 the optimizer picks)
    "oversized_gpus": 35.00,
    # 20 on-demand hours × ($1.00 − the spot target's $0.40)
    "spot_slack": 12.00,
    # 30 h × ($1.00 in us-east-1 − $0.80 in us-west-2)
    "cheaper_region": 6.00,
    # $10.00 spent × a data-wait share of 0.5
    "input_bound": 5.00,
    # $8.00 spent × (1 − 0.15 / 0.30)
    "low_mfu": 4.00,
    # 2 idle GPU-hours × $1.00 per GPU-hour
    "idle_gpus": 2.00,
    # 45 days old: no dollars of its own
    "stale_catalog": 0.00,
}


def _audit(tmp_path: Path, seed: Any, *, age_days: int, config: dict[str, Any] | None = None,
           since: str | None = None, db: Engine | None = None) -> dict[str, Any]:  # fmt: skip
    engine = db or new_engine(tmp_path)
    try:
        seed(engine)
        catalog = write_catalog(tmp_path / "offers.csv", age_days=age_days)
        service = AuditService(engine, clock=VirtualClock(NOW), catalog=lambda: catalog,
                               config=config, public=lambda: catalog)  # fmt: skip
        return service.audit(since)
    finally:
        if db is None:
            engine.dispose()


def test_each_finding_appears_once_with_its_dollars_ranked(tmp_path: Path, engine: Engine) -> None:
    """On SQLite and PostgreSQL (the ``engine`` fixture's two params)."""
    view = _audit(tmp_path, seed_findings, age_days=45, db=engine)
    found = {f["kind"]: f for f in view["findings"]}
    assert [f["kind"] for f in view["findings"]] == list(EXPECTED)
    for kind, dollars in EXPECTED.items():
        assert found[kind]["dollars"] == pytest.approx(dollars, abs=1e-6), kind
        assert found[kind]["action"], kind
    assert view["total_usd"] == pytest.approx(sum(EXPECTED.values()))
    assert view["since"] == NOW - 90 * 86400 and view["until"] == NOW
    assert found["idle_gpus"]["evidence"]["idle_gpu_hours"] == pytest.approx(2.0)
    assert found["left_up"]["evidence"] == {
        "cluster": "left-b", "cluster_id": 2, "task_ended_at": NOW - 4 * 86400,
        "billed_until": NOW, "hours_after": 96.0, "autostop": False, "still_billed": True,
    }  # fmt: skip
    assert found["left_up"]["action"].startswith("gpulease down left-b; set resources.autostop")
    assert found["oversized_gpus"]["evidence"]["suggested"] == "T4"
    assert found["oversized_gpus"]["evidence"]["suggested_instance_type"] == "g4dn.xlarge"
    assert found["cheaper_region"]["evidence"]["cheaper_region"] == "us-west-2"  # not eu-west-1
    assert found["commitment"]["evidence"]["reserved_source"] == "catalog price_reserved_1y"
    assert found["commitment"]["evidence"]["commit"] == 1
    assert found["spot_slack"]["evidence"]["slack_hours"] == pytest.approx(52.0)
    assert found["stale_catalog"]["evidence"]["age_days"] == 45
    # g4dn.xlarge has no reserved price and no discount is configured: said, not guessed
    assert any("g4dn.xlarge" in note for note in view["notes"])


def test_a_users_discount_prices_the_commitment(tmp_path: Path) -> None:
    config = {"pricing": {"discounts": [
        {"provider": "aws", "commitment": "1y", "off": "30%", "regions": ["eu-*"]}]}}  # fmt: skip
    view = _audit(tmp_path, seed_findings, age_days=45, config=config)
    (commit,) = [f for f in view["findings"] if f["kind"] == "commitment"]
    # 2,160 h × $0.70 × 30 % off
    assert commit["dollars"] == pytest.approx(453.60)
    assert commit["evidence"]["reserved_source"] == "config pricing.discounts (30% off)"


def test_a_shorter_period_sees_only_its_part_of_the_history(tmp_path: Path) -> None:
    view = _audit(tmp_path, seed_findings, age_days=45, since="6d")
    kinds = {f["kind"]: f["dollars"] for f in view["findings"]}
    assert kinds["left_up"] == pytest.approx(48.00)  # 96 h, all inside the 6 days
    assert "idle_gpus" not in kinds and "spot_slack" not in kinds  # 10 and 50 days ago
    assert kinds["commitment"] == pytest.approx(40.32)  # steady all 144 h: 144 × 0.28


def test_a_clean_history_has_no_findings(tmp_path: Path) -> None:
    view = _audit(tmp_path, seed_clean, age_days=2)
    assert view["findings"] == [] and view["total_usd"] == 0
    assert view["spend_usd"] == pytest.approx(0.80)


@pytest.mark.parametrize("since", ["soon", "-3d", "0d"])
def test_a_bad_since_names_it(tmp_path: Path, since: str) -> None:
    with pytest.raises(UserInputError, match="since"):
        _audit(tmp_path, seed_clean, age_days=2, since=since)


@given(amount=st.integers(min_value=1, max_value=10_000), unit=st.sampled_from(["m", "h", "d"]))
def test_since_is_a_period_ending_now(amount: int, unit: str) -> None:
    period = parse_since(f"{amount}{unit}", NOW)
    seconds = amount * {"m": 60, "h": 3600, "d": 86400}[unit]
    assert period.end == NOW and period.end - period.start == pytest.approx(seconds)


@given(text=st.text(max_size=12))
def test_since_is_a_duration_or_an_error_naming_it(text: str) -> None:
    try:
        period = parse_since(text, NOW)
    except UserInputError as exc:
        assert str(exc).startswith("since:")
    else:
        assert period.start < period.end == NOW
