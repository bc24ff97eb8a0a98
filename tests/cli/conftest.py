"""CLI tests run the real console entry point in a subprocess, with a private GPULEASE_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(self, home: Path) -> None:
        self.home = home

    def __call__(
        self, *args: str, check: bool = False, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "GPULEASE_HOME": str(self.home), "COLUMNS": "200"}
        result = subprocess.run(
            [sys.executable, "-m", "gpulease", *args],
            cwd=ROOT,
            check=False,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path / "home")


def configure_sim(cli: Cli, settings: str) -> Cli:
    """Give the home a config whose ``providers.sim`` section is ``settings`` (YAML lines)."""
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.yaml").write_text(f"providers:\n  sim:\n{settings}")
    return cli


def stop_server_and_nodes(cli: Cli, nodes_dir: str = "local") -> None:
    """Stop the home's server and make sure no node process of the local provider (whose root
    is ``home/nodes_dir``: ``local``, or ``sim/local`` for the sim's nodes) outlives the test."""
    from gpulease.providers.base import InstanceState
    from gpulease.providers.local import LocalProvider
    from tests.providers.procs import node_pids
    from tests.server.conftest import wait_until

    cli("server", "stop")
    nodes = LocalProvider(cli.home / nodes_dir, kill_grace_s=0.5)
    live = [i.id for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
    if live:
        nodes.terminate(live)
        wait_until(lambda: not node_pids(nodes, live) or None, 20, f"{nodes_dir} nodes to die")


def stop_server_and_sim_nodes(cli: Cli) -> None:
    """Stop the home's server and make sure no sim node process outlives the test."""
    stop_server_and_nodes(cli, "sim/local")


def show_job(cli: Cli, job_id: int = 1) -> dict[str, Any]:
    """``gpulease jobs show ID --json``."""
    out = cli("jobs", "show", str(job_id), "--json", check=True)
    view: dict[str, Any] = json.loads(out.stdout)
    return view
