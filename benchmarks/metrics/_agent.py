"""Real node agents for the metrics benchmarks: start ``python -m gpulease.agent serve`` with
scripted fake GPUs on a private node dir, and read its ring of samples back."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def fake_gpus(count: int) -> str:
    """The ``--fake-gpus`` script of ``count`` H100-like GPUs whose load moves every sample."""
    gpus = [{"index": i, "utilization_pct": [20.0 + i, 80.0, 95.0], "memory_pct": [40.0, 60.0]}
            for i in range(count)]  # fmt: skip
    return json.dumps({"name": "H100", "memory_total_mb": 81559.0, "power_limit_w": 700.0,
                       "gpus": gpus})  # fmt: skip


def start_agent(root: Path, interval: float, gpus: str) -> subprocess.Popen[bytes]:
    """An agent sampling every ``interval`` s (0: off), its token, port file and log in ``root``."""
    root.mkdir(parents=True)
    token = root / "token"
    token.write_text(secrets.token_urlsafe(24) + "\n")
    token.chmod(0o600)
    port_file = root / "port"
    args = [sys.executable, "-m", "gpulease.agent", "serve", "--host", "127.0.0.1", "--port", "0",
            "--port-file", str(port_file), "--token-file", str(token),
            "--node-dir", str(root / "node"), "--metrics-interval", str(interval),
            "--fake-gpus", gpus]  # fmt: skip
    log = open(root / "agent.log", "ab")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"agent did not start: see {root / 'agent.log'}")
        time.sleep(0.05)
    return proc


def agent_samples(root: Path, since: float | None = None) -> list[dict[str, Any]]:
    """The samples in the agent's ring (``GET /v1/metrics?since=``), oldest first."""
    from gpulease.agent.client import AgentClient

    port = (root / "port").read_text().strip()
    token = (root / "token").read_text().strip()
    client = AgentClient(f"http://127.0.0.1:{port}", token)
    try:
        samples: list[dict[str, Any]] = client.metrics(since).get("samples") or []
    finally:
        client.close()
    return samples
