"""The Grafana dashboards of ``deploy/grafana/``: ``scripts/grafana_dashboards.py``
(grafana-foundation-sdk) regenerates exactly the committed JSON, ``--check`` catches a stale
file, the dashboards have what Grafana's import needs (unique uids and panel ids, the
``datasource`` variable on every target, the cluster / job variable where the board is about
one), every query reads only names of docs/metrics.md, and every query parses as PromQL
(``promtool check rules`` on a rules file of them). That each returns data against a real
server is tests/deploy/test_dashboards_e2e.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.components import require
from tests.deploy.dashboards import GRAFANA, METRIC, ROOT, boards, targets, variable_queries

SCRIPT = ROOT / "scripts" / "grafana_dashboards.py"


def _script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip


def test_the_script_regenerates_the_committed_json(tmp_path: Path) -> None:
    out = _script("--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    made = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in GRAFANA.glob("*.json")}
    assert set(made) == {"fleet.json", "cluster.json", "job.json"} == set(committed)
    for name, text in made.items():
        assert text == committed[name], f"{name} is stale: run python {SCRIPT.relative_to(ROOT)}"
    assert _script("--check").returncode == 0

    (tmp_path / "job.json").write_text(made["job.json"].replace("MFU", "mfu"))
    out = _script("--check", "--out", str(tmp_path))
    assert out.returncode == 1 and "job.json" in out.stderr and "Traceback" not in out.stderr


def test_the_dashboards_are_importable() -> None:
    uids = [board["uid"] for board in boards().values()]
    assert sorted(uids) == ["gpulease-cluster", "gpulease-fleet", "gpulease-job"]
    for name, board in boards().items():
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)) and all(ids), name
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource", name
        assert variables["datasource"]["query"] == "prometheus", name
        for panel in board["panels"]:
            if panel["type"] == "row":
                continue
            assert panel["targets"] and panel["description"], (name, panel["title"])
            for target in panel["targets"]:
                assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert {(b, v) for b, v, _ in variable_queries()} == {("cluster.json", "cluster"),
                                                           ("job.json", "job_id")}  # fmt: skip


def test_each_board_filters_on_its_variable() -> None:
    for target in targets():
        if target.board == "cluster.json":
            assert 'cluster="$cluster"' in target.expr, target
        elif target.board == "job.json" and "(fleet)" not in target.panel:
            assert 'job_id="$job_id"' in target.expr, target
        elif target.board == "fleet.json":
            assert "$" not in target.expr.replace("$__rate_interval", ""), target


def test_the_queries_read_only_documented_metrics() -> None:
    documented = set(
        re.findall(r"`(gpulease_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text())
    )
    used = {m for t in targets() for m in METRIC.findall(t.expr)}
    used |= {m for _, _, q in variable_queries() for m in METRIC.findall(q)}
    used = {m.removesuffix("_bucket") for m in used}  # a histogram's bucket series
    assert used - documented == set()
    assert len(used) >= 30  # the boards cover the relayed series, not a token few


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    require("prometheus")
    rules = [{"record": f"dashboard:query_{i}", "expr": t.promql(cluster="c", job_id="1")}
             for i, t in enumerate(targets())]  # fmt: skip
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def test_the_docs_name_every_panel_and_alert() -> None:
    docs = (ROOT / "docs" / "grafana.md").read_text()
    titles = {p["title"] for b in boards().values() for p in b["panels"] if p["type"] != "row"}
    assert {t for t in titles if f"**{t}**" not in docs} == set()
    alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
    names = {r["alert"] for g in alerts["groups"] for r in g["rules"]}
    assert {n for n in names if f"`{n}`" not in docs} == set()
