"""A pool on the sim provider (scaled time), through the CLI, the SDK and a real server: three
managed jobs queue for a pool of at most two nodes; the pool grows to two (its setup runs once
per node), the third job runs on the first node freed, the idle nodes go after the idle timeout,
and ``pool down`` leaves no node process behind. A file without ``pool:`` and a job naming no live
pool are refused (exit 2, naming the field)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.client import InvalidRequest, connect
from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli, configure_sim, stop_server_and_sim_nodes
from tests.providers.procs import node_pids
from tests.server.conftest import wait_until


@pytest.fixture
def user(cli: Cli) -> Iterator[Cli]:
    configure_sim(cli, "    time_scale: 3600\n    provision_seconds: [60, 120]\n")
    yield cli
    stop_server_and_sim_nodes(cli)


@pytest.mark.slow
def test_a_pool_grows_with_the_queue_and_shrinks_when_idle(
    user: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done, setups = tmp_path / "done", tmp_path / "setups"
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(
        f"name: gpus\nresources:\n  accelerators: T4:1\nsetup: echo up >> {setups}\n"
        "pool:\n  min_nodes: 0\n  max_nodes: 2\n  idle_timeout: 1s\n"
    )
    job = {
        "name": "train",
        "resources": {"pool": "gpus"},
        "run": f"while [ ! -f {done} ]; do sleep 0.1; done; echo trained",
    }
    up = user("pool", "up", str(pool_file), "-p", "sim", check=True)
    assert "pool gpus up: 0..2 nodes" in up.stderr
    no_pool = tmp_path / "plain.yaml"
    no_pool.write_text("name: plain\nresources:\n  accelerators: T4:1\nrun: echo hi\n")
    refused = user("pool", "up", str(no_pool))
    assert refused.returncode == 2 and "error: pool:" in refused.stderr, refused.stderr
    monkeypatch.setenv("GPULEASE_HOME", str(user.home))  # the SDK, on the server the CLI started
    with connect() as api:
        elsewhere = {**job, "resources": {"pool": "elsewhere"}}
        with pytest.raises(
            InvalidRequest, match=r"resources\.pool: no live pool named 'elsewhere'"
        ):
            api.job_launch(elsewhere)
        ids = [api.job_launch(job)["id"] for _ in range(3)]

        def two_busy() -> dict[str, Any] | None:
            view = api.pool_status("gpus")
            busy = [n for n in view["nodes"] if n["state"] == "busy"]
            return view if len(busy) == 2 and len(view["waiting_jobs"]) == 1 else None

        view = wait_until(two_busy, 30, "two jobs on two pool nodes, one queued")
        assert view["status"] == "ready" and view["desired_nodes"] == 2
        assert sum(d["add"] for d in view["decisions"]) == 2  # max 2, three jobs
        assert all(n["where"].startswith("sim/") for n in view["nodes"])
        text = user("pool", "status", "gpus", check=True).stdout
        assert "pool gpus: ready" in text and "busy (running job" in text

        done.touch()
        wait_until(lambda: all(api.job(i)["status"] == "succeeded" for i in ids) or None, 30,
                   "every job to succeed")  # fmt: skip
        assert setups.read_text().count("up") == 2  # once per node: the third job reused one
        assert all(api.job(i)["cost"]["spent_usd"] > 0 for i in ids)  # billed while on a node

        def shrunk() -> dict[str, Any] | None:
            view = api.pool_status("gpus")
            return view if not view["nodes"] else None

        view = wait_until(shrunk, 30, "the idle nodes to be removed")
        assert view["desired_nodes"] == 0
        assert any(d["remove"] and "idle for 1 s" in d["reason"] for d in view["decisions"])
        down = json.loads(user("pool", "down", "gpus", "--json", check=True).stdout)
        assert down["status"] == "shutting_down"
        wait_until(lambda: api.pool_status("gpus")["status"] == "down" or None, 30, "pool down")
        assert [p["status"] for p in api.pool_list()] == ["down"]
    nodes = LocalProvider(user.home / "sim" / "local")
    ids_ = [p.stem for p in (nodes.root / "instances").glob("*.json")]
    live = [i for i in nodes.list_instances({}) if i.state is not InstanceState.TERMINATED]
    assert len(ids_) == 2 and not live and node_pids(nodes, ids_) == []
