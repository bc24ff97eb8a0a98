"""Autostop's load rule end to end: a real server process, its telemetry relay pulling real agents
of local nodes with fake GPUs (one scripted at 0 %, one at 50 %), and the reconcile loop.

The server has no clock injection (it runs on the system clock; only the controller's unit tests
use a virtual one), so the test does not wait out the idle minute: once both clusters run, it
writes into the state DB that they started running two minutes ago (``status_changed_at`` and
``last_activity_at``). What decides is real: the relay's telemetry points and its
``gpu_active_at`` stamp — the idle cluster is stopped by the GPU rule, the busy one is not.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from gpulease.state import make_engine, session_scope
from gpulease.state.models import Cluster
from tests.server.conftest import ServerProcess
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

CONFIG = """\
providers:
  local:
    gpus: 2
    accelerator: T4
    gpu_load: [0, 50]
server:
  telemetry:
    interval_s: 1
"""
RULE = {"idle_minutes": 1, "gpu_utilisation_below": 5}


def _task(name: str) -> dict[str, Any]:
    resources = {"providers": ["local"], "accelerators": "T4:1", "autostop": RULE}
    return {"name": name, "run": "sleep 600", "resources": resources}


def _backdate(home: Path, names: list[str], seconds: float) -> None:
    """The clusters have been running (and their autostop set) ``seconds`` longer."""
    engine = make_engine(f"sqlite:///{home / 'state.db'}")
    try:
        past = time.time() - seconds
        with session_scope(engine) as session:
            session.execute(
                update(Cluster)
                .where(Cluster.name.in_(names))
                .values(status_changed_at=past, last_activity_at=past)
            )
    finally:
        engine.dispose()


def _gpu_util(server: ServerProcess, name: str) -> float | None:
    (cluster,) = server.api.telemetry_latest(name)["clusters"]
    value = cluster.get("gpu_utilization_pct")
    return None if value is None else float(value)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(CONFIG)
    proc = ServerProcess(home)
    yield proc
    for name in ("idle", "busy"):
        with contextlib.suppress(Exception):  # best effort: it may never have launched
            proc.api.down(name)
    try:
        wait_until(lambda: proc.node_processes() == [] or None, 30, "nodes to go")
    finally:
        proc.stop()


def test_the_idle_gpu_cluster_is_stopped_by_the_gpu_rule_and_the_busy_one_is_not(
    server: ServerProcess,
) -> None:
    api = server.start().api
    for name in ("idle", "busy"):
        view = api.launch(_task(name))
        assert view["autostop"] == {"minutes": 1, "down": False, "gpu_utilisation_below": 5.0}
    for name in ("idle", "busy"):
        server.wait_status(name, {"running"}, timeout=60)
    # which cluster got which fake GPU (0 %: GPU 0, 50 %: GPU 1) is the provider's choice
    utils = {n: wait_until(lambda n=n: (u := _gpu_util(server, n)) is not None and (u,), 30,
                           f"{n}'s GPU telemetry")[0] for n in ("idle", "busy")}  # fmt: skip
    idle, busy = sorted(utils, key=lambda n: utils[n])
    assert utils[idle] == 0.0 and utils[busy] == 50.0

    _backdate(server.home, ["idle", "busy"], 120.0)
    stopped = server.wait_status(idle, {"stopping", "stopped"}, timeout=30)
    assert stopped["reason"] == "autostop: GPUs below 5% for 1 min"
    server.wait_status(idle, {"stopped"}, timeout=30)
    assert server.instances(idle), "stopped, not terminated: the disk is kept"
    after = time.time()
    # the relay keeps stamping the busy one, and the passes that stopped the idle one (and the
    # passes since) left it running
    wait_until(lambda: (api.cluster(busy)["gpu_active_at"] or 0) > after, 30, "a busy stamp")
    still = api.cluster(busy)
    assert still["status"] == "running", still["reason"]
