"""``/metrics`` end to end: the real server process with a sim cluster running (real agent),
``gpulease metrics prometheus-config`` run as a user types it, and a real Prometheus (Debian's)
on 127.0.0.1 scraping the server with that config and answering PromQL over its HTTP API: the
running cluster and its $/h as the server quoted it. Also: 401 without the token over real HTTP,
and ``server.metrics.open_to_loopback`` letting a loopback scraper in without one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.components import require
from tests.prometheus import query, start_prometheus, stop
from tests.providers.procs import node_pids
from tests.server.conftest import ROOT, ServerProcess
from tests.waiting import wait_until

SIM = "providers:\n  sim:\n    time_scale: 60\n    provision_seconds: [0, 0]\n"


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[ServerProcess]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(SIM)
    proc = ServerProcess(home)
    yield proc
    proc.stop()
    nodes = LocalProvider(home / "sim" / "local", kill_grace_s=0.5)
    live = [i.id for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        nodes.terminate(live)
        wait_until(lambda: not node_pids(nodes, live) or None, 20, "sim nodes to die")


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "gpulease", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    """Start Prometheus with a config file: ``start(config_path) -> base URL``."""
    require("prometheus")
    procs: list[subprocess.Popen[bytes]] = []

    def start(config: Path) -> str:
        work = tmp_path / f"prometheus-{len(procs)}"
        work.mkdir()
        proc, url = start_prometheus(config, work)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        stop(proc)


def server_url(server: ServerProcess) -> str:
    from gpulease.client.server import read_info

    info = read_info(server.home)
    assert info is not None
    return info.url


@pytest.mark.slow
def test_prometheus_scrapes_the_server_with_the_printed_config(
    sim_server: ServerProcess, prometheus: Any, tmp_path: Path
) -> None:
    server = sim_server.start()
    task = {"name": "watched", "resources": {"providers": ["sim"], "accelerators": "T4:1"},
            "run": "sleep 600"}  # fmt: skip
    server.api.launch(task)
    view = server.wait_status("watched", {"running"}, timeout=90)
    assert view["price_per_hour"] and view["price_per_hour"] > 0

    metrics = f"{server_url(server)}/metrics"
    assert httpx.get(metrics, timeout=5).status_code == 401  # no token, not opened to loopback

    out = _cli(server.home, "metrics", "prometheus-config", "--interval", "1s")
    assert out.returncode == 0, out.stderr
    assert (server.home / "server.token").read_text().strip() not in out.stdout
    config = tmp_path / "prometheus.yml"
    config.write_text(out.stdout)
    url = prometheus(config)

    up = wait_until(lambda: query(url, 'up{job="gpulease"} == 1') or None, 30, "a scrape")
    assert up[0]["metric"]["instance"] == server_url(server).removeprefix("http://")
    running = wait_until(
        lambda: query(url, 'gpulease_clusters{status="running"}') or None, 30, "the gauge"
    )
    assert float(running[0]["value"][1]) == 1
    price = query(url, 'gpulease_cluster_price_usd_per_hour{cluster="watched"}')
    assert len(price) == 1, price
    labels = price[0]["metric"]
    assert float(price[0]["value"][1]) == pytest.approx(view["price_per_hour"])
    assert labels["provider"] == "sim" and labels["instance_type"] == view["instance_type"]
    assert labels["spot"] == "false" and labels["job"] == "gpulease"  # the scrape job's label
    assert query(url, "gpulease_launches_total >= 1")
    assert query(url, 'gpulease_reconcile_pass_seconds_count{loop="clusters"} > 0')
    assert query(url, 'gpulease_nodes{status="ready"} == 1')


@pytest.mark.slow
def test_open_to_loopback_lets_a_local_scraper_in_without_the_token(
    sim_server: ServerProcess,
) -> None:
    home = sim_server.home
    (home / "config.yaml").write_text(SIM + "server:\n  metrics:\n    open_to_loopback: true\n")
    server = sim_server.start()
    answer = httpx.get(f"{server_url(server)}/metrics", timeout=5)
    assert answer.status_code == 200
    names = {f.name for f in text_string_to_metric_families(answer.text)}
    assert {"gpulease_clusters", "gpulease_launches", "gpulease_build_info"} <= names
    assert httpx.get(f"{server_url(server)}/v1/clusters", timeout=5).status_code == 401

    out = _cli(home, "metrics", "prometheus-config", "--no-auth")
    assert out.returncode == 0 and "authorization" not in out.stdout, out

    token = (home / "server.token").read_text().strip()
    copy = home.parent / "for-prometheus" / "token"
    copy.parent.mkdir()
    out = _cli(home, "metrics", "prometheus-config", "--token-file", str(copy))
    assert out.returncode == 0, out.stderr
    assert f'credentials_file: "{copy}"' in out.stdout and token not in out.stdout
    assert copy.read_text().strip() == token and copy.stat().st_mode & 0o777 == 0o600
    out = _cli(home, "metrics", "prometheus-config", "--inline-token")
    assert out.returncode == 0 and f'credentials: "{token}"' in out.stdout, out.stderr


def test_prometheus_config_without_a_server_or_with_bad_options(tmp_path: Path) -> None:
    out = _cli(tmp_path, "metrics", "prometheus-config")
    assert out.returncode == 1 and "no gpulease server is running" in out.stderr, out
    assert "Traceback" not in out.stderr
    for args in (["--inline-token", "--no-auth"], ["--interval", "soon"]):
        out = _cli(tmp_path, "metrics", "prometheus-config", *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out
        assert args[0] in out.stderr


def test_a_bad_metrics_setting_stops_the_server_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("server:\n  metrics:\n    open_to_loopback: maybe\n")
    env = {**os.environ, "GPULEASE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "gpulease.server", "run"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "error: server.metrics.open_to_loopback: true or false, not 'maybe'" in out.stderr
    assert not (tmp_path / "server.json").exists()
