"""The web dashboard in a real headless Chromium (Debian's, driven by Selenium through Debian's
chromedriver) against the real server process: a local cluster and a managed job on fake GPUs
(the agent's fake sampler, relayed by the server), a service (a stdlib HTTP replica behind the
server's load balancer) and a pool of one node, ``gpulease dashboard`` run as a user types it
(``$BROWSER`` standing in for the desktop's browser, so the open path runs too). Each page loads
without console errors; the overview lists the service and the pool; the cluster page's charts
plot the GPUs' relayed samples at the load the config scripted; the job page shows its attempts
and charts; the service page its replica, its scaling decision, its events and the load it read;
a used link says so. A screenshot of each page is kept in the folder the test prints
(``test-artifacts/dashboard/``, gitignored; ``GPULEASE_TEST_ARTIFACTS`` moves it)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.components import require
from tests.server.conftest import ROOT, ServerProcess
from tests.server.test_serve_e2e import REPLICA
from tests.waiting import wait_until

CONFIG = """\
providers:
  local:
    gpus: 4
    accelerator: T4
    gpu_load: [[20, 80], 60, 30, 30]
    gpu_memory: 40
server:
  telemetry:
    interval_s: 1
"""
#: the managed job: 32 samples a step, 10 steps a second, a checkpoint every 20 steps, told to
#: the agent through gpulease.train's stats file
TRAINER = """python - <<'EOF'
import time
from gpulease.train import report_step, train_stats
step = 0
while True:
    time.sleep(0.1)
    step += 1
    report_step(step, samples=32)
    if step % 20 == 0:
        train_stats().checkpoint(step)
EOF
"""
#: a service of one replica (no autoscaler: its one decision is serve up's) and a pool of one
#: node, both on the local provider and without GPUs (the cluster and the job take all four)
SERVICE = {"port": 8080, "readiness_probe": {"path": "/health", "initial_delay": "60s"},
           "replicas": {"min": 1, "max": 1}}  # fmt: skip
POOL = {"name": "spare", "resources": {"providers": ["local"]}, "run": "true",
        "pool": {"min_nodes": 1, "max_nodes": 2}}  # fmt: skip
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1280,1800",
)  # fmt: skip


def artifacts_dir() -> Path:
    base = os.environ.get("GPULEASE_TEST_ARTIFACTS")
    path = (Path(base) if base else ROOT / "test-artifacts") / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    require("chromium")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(shutil.which("chromedriver"), log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def gpu_server(home: Path, server: ServerProcess) -> ServerProcess:
    (home / "config.yaml").write_text(CONFIG)
    return server.start()


def _errors(driver: Any) -> list[dict[str, Any]]:
    """The console's errors since the last call (the log is drained on reading)."""
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _loaded(driver: Any, since: str | None = None) -> str:
    """Wait until the page drew from the API (a newer draw than ``since``); fail at once on a
    console error or a failed draw."""
    seen: list[dict[str, Any]] = []

    def drawn() -> str | None:
        seen.extend(_errors(driver))
        assert not seen, seen
        failed = driver.execute_script("return document.body.dataset.failed || null")
        assert failed is None, failed
        stamp: str | None = driver.execute_script("return document.body.dataset.loaded || null")
        return stamp if stamp and stamp != since else None

    return wait_until(drawn, 20, "the page to draw")


def _charts(driver: Any) -> dict[str, dict[str, Any]]:
    script = """return [...document.querySelectorAll('.chart')].map((c) => ({
        id: c.dataset.chart, points: Number(c.dataset.points),
        lines: [...c.querySelectorAll('polyline')].map((l) => ({
            name: l.querySelector('title').textContent, points: Number(l.dataset.points),
            last: Number(l.dataset.last)}))}))"""
    return {c["id"]: c for c in driver.execute_script(script)}


def _requests(endpoint: str) -> None:
    for path in ("/a", "/b", "/c"):
        assert httpx.get(endpoint + path, timeout=10).status_code == 200


def _cells(driver: Any, row: str) -> list[str]:
    """The texts of the cells of the table row ``row`` (a CSS selector)."""
    cells: list[str] = driver.execute_script(
        "return [...document.querySelector(arguments[0]).cells].map((c) => c.textContent)", row
    )
    return cells


def _dashboard_cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "GPULEASE_HOME": str(home), **env}
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "SSH_CONNECTION", "SSH_TTY", "BROWSER"):
        if name not in env:
            full.pop(name, None)
    argv = [sys.executable, "-m", "gpulease", "dashboard", *args]
    return subprocess.run(argv, cwd=ROOT, env=full, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip


def _fake_browser(tmp_path: Path) -> tuple[Path, Path]:
    """A ``$BROWSER`` program that writes the URL it is given to a file."""
    opened = tmp_path / "opened.txt"
    program = tmp_path / "fake-browser"
    program.write_text(f'#!/bin/sh\nprintf %s "$1" > {opened}\n')
    program.chmod(0o755)
    return program, opened


@pytest.mark.slow
def test_the_dashboard_in_chromium(
    browser: Any, gpu_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = artifacts_dir()
    with capsys.disabled():  # shown in a plain run too (not only with -s or on failure)
        print(f"\ndashboard screenshots: {out_dir}")
    api, home = gpu_server.api, gpu_server.home
    two_gpus = {"providers": ["local"], "accelerators": "T4:2"}
    api.launch({"name": "watched", "resources": two_gpus, "run": "sleep 600"})
    job = api.job_launch({"name": "trainer", "resources": two_gpus, "run": TRAINER})
    app = tmp_path / "app"  # the replica's workdir (not tmp_path: Chromium's profile is there)
    app.mkdir()
    (app / "replica.py").write_text(REPLICA)
    endpoint = api.serve_up(
        {
            "name": "web",
            "resources": {"providers": ["local"]},
            "envs": {"VERSION": "1"},
            "workdir": str(app),
            "run": "exec python replica.py",
            "service": SERVICE,
        }
    )["endpoint"]
    api.pool_up(POOL)
    gpu_server.wait_status("watched", {"running"}, timeout=60)
    wait_until(lambda: api.serve_status("web")["status"] == "ready" or None, 60,
               "the service's replica to be ready")  # fmt: skip
    wait_until(lambda: [n["state"] for n in api.pool_status("spare")["nodes"]] == ["idle"] or None,
               60, "the pool's node to be idle")  # fmt: skip
    _requests(endpoint)  # the balancer's figures are over the last minute
    token = (home / "server.token").read_text().strip()

    # gpulease dashboard: prints the link and hands it to the browser; the token never shows
    program, opened = _fake_browser(tmp_path)
    done = _dashboard_cli(home, BROWSER=str(program))
    assert done.returncode == 0, done.stderr
    link = done.stdout.strip()
    assert "/ui/login?t=" in link and token not in done.stdout + done.stderr
    assert opened.read_text() == link
    assert "works once" in done.stderr

    browser.get(link)
    assert browser.current_url.endswith("/ui/")
    _loaded(browser)
    rows = browser.execute_script(
        "return [...document.querySelectorAll('#clusters tbody tr')].map(r => r.dataset.cluster)"
    )
    assert "watched" in rows
    assert browser.find_elements("css selector", f'#jobs tr[data-job="{job["id"]}"]')
    cells = _cells(browser, '#services tr[data-service="web"]')
    assert cells[:4] == ["web", "ready", endpoint, "1 / 1"], cells
    assert cells[4].endswith("req/s") and cells[5].endswith(" ms"), cells  # QPS, p50
    cells = _cells(browser, '#pools tr[data-pool="spare"]')
    assert cells[:4] == ["spare", "ready", "1", "0"] and cells[6] == "1–2", cells  # 1 idle
    browser.save_screenshot(str(out_dir / "overview.png"))
    assert _errors(browser) == []

    # the cluster page, once the relay stored samples of both GPUs
    def both_gpus_twice() -> bool:
        nodes = api.telemetry("watched")["nodes"]
        seen = [g["index"] for n in nodes for p in n["points"] for g in p["gpus"]]
        return all(seen.count(index) >= 2 for index in (0, 1))

    wait_until(both_gpus_twice, 40, "two relayed points of both fake GPUs")
    browser.get(link.split("/ui/")[0] + "/ui/cluster?name=watched")
    _loaded(browser)
    charts = _charts(browser)
    assert set(charts) >= {"gpu-util", "gpu-memory"}
    util, memory = charts["gpu-util"], charts["gpu-memory"]
    assert len(util["lines"]) == 2 and all(line["points"] >= 2 for line in util["lines"]), util
    steady = [line for line in util["lines"] if line["name"].endswith("GPU 1")]
    assert steady and steady[0]["last"] == pytest.approx(60), util  # gpu_load's second GPU
    assert {round(line["last"]) for line in memory["lines"]} == {40}, memory
    nodes = browser.find_elements("css selector", "#nodes tbody tr[data-rank]")
    assert len(nodes) == 1 and "ready" in nodes[0].text
    assert "running" in browser.find_element("css selector", "#events").text
    browser.save_screenshot(str(out_dir / "cluster.png"))
    assert _errors(browser) == []

    # the job page, once its attempt's GPUs were relayed too
    def job_gpus() -> bool:
        nodes = api.job_telemetry(job["id"])["nodes"]
        return any(len(p["gpus"]) == 2 for n in nodes for p in n["points"])

    def job_trains() -> bool:
        nodes = api.job_telemetry(job["id"])["nodes"]
        return any(p["train"] and p["train"]["checkpoint_step"] for n in nodes for p in n["points"])

    wait_until(job_gpus, 30, "relayed samples of the job's GPUs")
    wait_until(job_trains, 30, "the job's relayed training figures")
    browser.get(link.split("/ui/")[0] + f"/ui/job?id={job['id']}")
    _loaded(browser)
    charts = _charts(browser)
    assert set(charts) >= {"throughput", "mfu", "data-wait", "gpu-util"}
    assert len(charts["gpu-util"]["lines"]) == 2, charts  # the job's attempt's fake GPUs
    throughput = charts["throughput"]["lines"]
    assert throughput and throughput[0]["last"] > 0, charts
    steps = browser.find_elements("css selector", "#checkpoints tbody td.num")
    assert steps and int(steps[0].text) % 20 == 0, [s.text for s in steps]
    assert browser.find_elements("css selector", "#attempts tbody tr")
    browser.save_screenshot(str(out_dir / "job.png"))
    assert _errors(browser) == []

    # the service page: its replica, the decision serve up made, its events, the load it read
    _requests(endpoint)

    def served() -> list[dict[str, Any]] | None:  # the server's load history saw the requests
        answer = httpx.get(f"{api.url}/v1/services/web/load", timeout=10,
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        points: list[dict[str, Any]] = answer.json()["points"]
        return points if any(p["latency_p50_ms"] is not None for p in points) else None

    points = wait_until(served, 10, "a load point with the requests (a point a second)")
    browser.get(link.split("/ui/")[0] + "/ui/service?name=web")
    _loaded(browser)
    (replica,) = browser.find_elements("css selector", "#replicas tbody tr[data-replica]")
    assert replica.get_attribute("data-replica") == "1"
    assert "web-1-1" in replica.text and "ready" in replica.text and "on-demand" in replica.text
    (decision,) = browser.find_elements("css selector", "#decisions tbody tr")
    assert "0 → 1" in decision.text and "serve up: replicas.min" in decision.text
    assert "ready" in browser.find_element("css selector", "#events").text
    charts = _charts(browser)
    assert set(charts) >= {"qps", "latency", "replicas"}
    assert charts["qps"]["points"] >= len(points) and charts["latency"]["points"] >= 1, charts
    lines = {line["name"]: line for line in charts["replicas"]["lines"]}
    assert lines["desired (the decisions)"]["last"] == 1, charts
    assert lines["behind the endpoint"]["last"] == 1, charts
    browser.save_screenshot(str(out_dir / "service.png"))
    assert _errors(browser) == []

    # a used link says so (401); --no-open only prints a new one
    browser.get(link)
    assert "already used" in browser.find_element("css selector", "main").text
    browser.save_screenshot(str(out_dir / "used-link.png"))
    printed = _dashboard_cli(home, "--no-open", BROWSER=str(program))
    assert printed.returncode == 0 and printed.stdout.strip() != link
    assert opened.read_text() == link  # not opened again
    headless = _dashboard_cli(home)
    assert headless.returncode == 0 and "not opening a browser (no DISPLAY)" in headless.stderr
    secret = link.partition("?t=")[2]
    logged = (home / "server.log").read_text()
    assert secret not in logged and token not in logged  # neither secret reaches the log
    for name in ("overview", "cluster", "job", "service"):
        assert (out_dir / f"{name}.png").stat().st_size > 10_000
