"""Reading the committed Grafana dashboards (``deploy/grafana/*.json``) the way Grafana runs
them: every panel target's PromQL with the template variables and Grafana's interval macros
substituted. Shared by the dashboard tests."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
METRIC = re.compile(r"\bgpulease_[a-z_]+")


@dataclass(frozen=True)
class Target:
    """One query of one panel of one dashboard."""

    board: str
    panel: str
    ref_id: str
    expr: str

    def promql(self, *, cluster: str = "", job_id: str = "", window: str = "30s") -> str:
        """The expression as Grafana sends it, for these variable values."""
        out = self.expr.replace("$cluster", cluster).replace("$job_id", job_id)
        for macro in ("$__rate_interval", "$__interval", "$__range"):
            out = out.replace(macro, window)
        assert "$" not in out, out
        return out


def boards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(GRAFANA.glob("*.json"))}


def targets() -> list[Target]:
    found = []
    for name, board in boards().items():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                found.append(Target(name, panel["title"], target["refId"], target["expr"]))
    return found


def variable_queries() -> list[tuple[str, str, str]]:
    """(board, variable name, ``label_values(METRIC, LABEL)`` query) of the query variables."""
    return [(name, v["name"], v["query"]) for name, board in boards().items()
            for v in board["templating"]["list"] if v["type"] == "query"]  # fmt: skip
