"""A real Prometheus (Debian's) for tests: :func:`start_prometheus` runs it on a free loopback
port with a config file and its own TSDB dir, :func:`query` asks it PromQL, :func:`stop` ends it.
The caller checks the component first (``tests.components.require("prometheus")``)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_prometheus(config: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Prometheus reading ``config``, its TSDB and log under ``work``; (process, base URL) once
    it answers ``/-/ready``."""
    port = free_port()
    with open(work / "prometheus.log", "ab") as log:
        proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: ready(url), 30, "prometheus to be ready")
    return proc, url


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """The instant vector (or scalar) PromQL answers now; asserts the query succeeded."""
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", (promql, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
