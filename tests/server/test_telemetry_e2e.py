"""Telemetry end to end: the real server process relaying a 2-node local cluster whose agents
report scripted fake GPUs (``providers.local.gpu_load``): the utilisation of each node's GPUs
through the read API (stored points), ``/v1/telemetry/latest`` (newest raw samples),
``/metrics`` (the relayed series, over real HTTP with the API token) and the cluster's
``gpu_active_at``; and a bad ``server.telemetry`` stopping the server with exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from gpulease.state import make_engine, session_scope
from gpulease.state.models import Cluster
from tests.server.conftest import ROOT, ServerProcess, task_body
from tests.waiting import wait_until

CONFIG = """\
providers:
  local:
    gpus: 4
    accelerator: T4
    gpu_load: [70, 20, 90, 40]      # per fake GPU number; each node gets two of them
server:
  telemetry:
    interval_s: 1
"""


def _points_per_node(view: dict[str, Any]) -> dict[int, list[dict[str, Any]]] | None:
    nodes = {n["node_rank"]: n["points"] for n in view["nodes"]}
    return nodes if sorted(nodes) == [0, 1] and all(nodes.values()) else None


def test_a_two_node_clusters_scripted_gpus_reach_the_api_latest_and_metrics(
    home: Path, server: ServerProcess
) -> None:
    (home / "config.yaml").write_text(CONFIG)
    api = server.start().api
    task = task_body("sleep 300", name="tele", nodes=2, resources={
        "providers": ["local"], "accelerators": "T4:2"})  # fmt: skip
    api.launch(task, name="tele")
    server.wait_status("tele", {"running"}, timeout=60)

    nodes = wait_until(lambda: _points_per_node(api.telemetry("tele")), 40, "stored points")
    per_node = {rank: sorted(g["utilization_pct"] for g in points[-1]["gpus"])
                for rank, points in nodes.items()}  # fmt: skip
    assert sorted(per_node.values()) == [[20.0, 70.0], [40.0, 90.0]]
    for points in nodes.values():
        assert points[-1]["samples"] >= 1 and points[-1]["node"]["cpu_count"] >= 1
    coarse = api.telemetry("tele", resolution=60)
    assert coarse["resolution_s"] == 60 and _points_per_node(coarse) is not None

    latest = api.telemetry_latest(cluster="tele")["clusters"]
    assert [c["cluster"] for c in latest] == ["tele"]
    (entry,) = latest
    assert entry["provider"] == "local" and entry["spot"] is False
    assert entry["gpu_utilization_pct"] == 55.0
    assert [n["node_rank"] for n in entry["nodes"]] == [0, 1]
    assert all(n["sample"]["gpu_source"] == "fake" for n in entry["nodes"])
    assert api.cluster("tele")["name"] == "tele"

    info = api.health()
    assert info["status"] == "ok"
    token = (home / "server.token").read_text().strip()
    text = httpx.get(f"{api.url}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    util: dict[str, list[float]] = {}
    for s in families["gpulease_gpu_utilization_percent"].samples:
        assert s.labels["cluster"] == "tele" and "job" not in s.labels
        util.setdefault(s.labels["node_rank"], []).append(s.value)
    assert {rank: sorted(v) for rank, v in util.items()} == {
        str(rank): values for rank, values in per_node.items()
    }
    assert "gpulease_clusters" in families  # the control plane comes first, unchanged
    assert families["gpulease_telemetry_relay_seconds"].samples
    engine = make_engine(f"sqlite:///{home / 'state.db'}")
    try:
        with session_scope(engine) as session:  # GPUs at ≥ 5 %: the relay stamps the cluster busy
            stamped = session.scalars(select(Cluster.gpu_active_at).where(Cluster.name == "tele"))
            assert (stamped.one() or 0) > 0
    finally:
        engine.dispose()


def test_a_bad_telemetry_setting_stops_the_server_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("server:\n  telemetry:\n    retention: {10s: ever}\n")
    env = {**os.environ, "GPULEASE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "gpulease.server", "run"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "error: server.telemetry.retention.10s: a duration such as" in out.stderr
    assert not (tmp_path / "server.json").exists()
