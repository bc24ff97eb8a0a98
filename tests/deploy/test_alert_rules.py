"""The alert rules of ``deploy/prometheus/alerts.yml`` through Debian's ``promtool``: they check,
their unit tests (``alerts_test.yml``: series that make each alert fire and series that must
not) pass, every alert is tested both ways, the tests bite (a rule with a broken threshold fails
them), and every metric the rules read is one docs/metrics.md names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.components import require

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "deploy" / "prometheus"
RULES = RULES_DIR / "alerts.yml"
RULE_TESTS = RULES_DIR / "alerts_test.yml"


def _promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    require("prometheus")
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in out.stdout


def test_promtool_unit_tests_pass() -> None:
    out = _promtool("test", "rules", str(RULE_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for group in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in group["alert_rule_test"]:
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    names = {rule["alert"] for rule in _alerts()}
    assert names == fired, names ^ fired
    assert names == silent, names ^ silent


def test_every_alert_has_a_severity_and_annotations() -> None:
    for rule in _alerts():
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_a_broken_threshold_fails_the_unit_tests(tmp_path: Path) -> None:
    broken = RULES.read_text().replace(
        "(gpulease_gpu_utilization_percent) < 10", "(gpulease_gpu_utilization_percent) < 3"
    )
    assert broken != RULES.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    shutil.copyfile(RULE_TESTS, tmp_path / "alerts_test.yml")
    out = _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert out.returncode != 0 and "GpuleaseGpusIdleWhileBilled" in out.stderr, out


def test_the_rules_read_only_documented_metrics() -> None:
    documented = set(
        re.findall(r"`(gpulease_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text())
    )
    used = set(re.findall(r"\bgpulease_[a-z_]+", "\n".join(r["expr"] for r in _alerts())))
    assert used and used <= documented, used - documented
