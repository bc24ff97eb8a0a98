"""A spot pool on the sim provider (scaled time), through the CLI, the SDK and a real server: a
checkpointing managed job runs on the pool's node; a spot-availability trace preempts the node
mid-run; the agent relays the notice (the task checkpoints and exits 75), the node is torn down
and no longer counted, the job recovers onto a new node the pool launches, resumes from its
checkpoint and SUCCEEDS; ``pool status`` says so all along. The node left then goes back to the
pool idle after a job that fails (the next one finds no checkpoint of the previous one) and after
a job cancelled while it runs."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpulease.client import connect
from gpulease.providers.base import InstanceState
from gpulease.providers.local import LocalProvider
from tests.cli.conftest import Cli, configure_sim, stop_server_and_sim_nodes
from tests.cli.test_jobs_spot_train import write_trace
from tests.waiting import wait_until

AFTER = 10  # steps (0.1 s each) the job does once resumed from a checkpoint; it counts until then
SCALE, OUTAGE_TICK, NOTICE_S = 120.0, 16, 60.0  # spot out at tick 16 of 60 s: 8 s real


@pytest.fixture
def user(cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    """120× real time: spot is out for one 60 s tick (0.5 s) after 16 ticks (8 s), with a 60 s
    (0.5 s) notice; a node provisions in 30 s (0.25 s)."""
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, OUTAGE_TICK), (0, 1), (1, 600)], gap_s=60)
    configure_sim(
        cli,
        f"    time_scale: {SCALE:g}\n    provision_seconds: [30, 30]\n"
        f"    notice_seconds: {NOTICE_S:g}\n    spot_trace: {trace}\n",
    )
    yield cli
    stop_server_and_sim_nodes(cli)


COUNTER = """import os, signal, sys, time
from pathlib import Path
from gpulease.storage.manifest import write_manifest

ck = Path(os.environ["GPULEASE_CHECKPOINT_DIR"])
ck.mkdir(parents=True, exist_ok=True)
done = [int(p.name[5:]) for p in ck.glob("step-*") if (p / "manifest.json").exists()]
n = max(done, default=0)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))


def say(line):
    with open(sys.argv[1], "a") as f:
        f.write(line + "\\n")


def save(n):
    d = ck / f"step-{n}"
    d.mkdir(exist_ok=True)
    (d / "n").write_text(str(n))
    write_manifest(d, n, ["n"])


say(f"resumed from {n}")
end = n + int(sys.argv[2]) if n else 3000  # from scratch: until preempted (5 min at most)
while n < end:
    n += 1
    time.sleep(0.1)
    if n % 5 == 0 or stop:
        save(n)
    if stop:
        say(f"stopped at {n}")
        sys.exit(75)
save(n)
say(f"done at {n}")
"""


def _job(tmp_path: Path, log: Path) -> dict[str, Any]:
    """A job that counts, checkpointing (a manifest each: complete ones) every 5 steps; on SIGTERM
    (the preemption notice) it saves one and exits 75; resumed from a checkpoint, it counts AFTER
    more steps and ends."""
    script = tmp_path / "count.py"
    script.write_text(COUNTER)
    return {"name": "count", "resources": {"pool": "spotty"},
            "run": f"{sys.executable} {script} {log} {AFTER}",
            "checkpoint": {"sync_interval": "1s"}}  # fmt: skip


def _sleeping(naps: str) -> list[int]:
    """Live pids of ``sleep NAPS``."""
    found = []
    for pid_dir in Path("/proc").iterdir():
        try:
            argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sleep", naps.encode()]:
            found.append(int(pid_dir.name))
    return found


@pytest.mark.slow
def test_a_preempted_pool_node_s_job_recovers_and_nodes_outlive_failed_and_cancelled_jobs(
    user: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "steps.log"
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(
        "name: spotty\nresources:\n  accelerators: T4:1\n  use_spot: true\n"
        "pool:\n  min_nodes: 1\n  max_nodes: 2\n  idle_timeout: 1h\n"
    )
    user("pool", "up", str(pool_file), "-p", "sim", check=True)
    monkeypatch.setenv("GPULEASE_HOME", str(user.home))
    with connect() as api:
        job_id = api.job_launch(_job(tmp_path, log))["id"]
        wait_until(lambda: api.job(job_id)["status"] == "running" or None, 30, "the job to run")
        (first,) = [n["name"] for n in api.pool_status("spotty")["nodes"] if n["job_id"]]
        clock = json.loads((user.home / "sim" / "clock.json").read_text())
        notice_in = (OUTAGE_TICK * 60.0 - NOTICE_S) / SCALE - (time.time() - clock["real_start"])
        assert notice_in > 0, "the job started after the spot outage: this machine is too slow"

        def recovered() -> dict[str, Any] | None:
            view = api.job(job_id)
            return view if view["recoveries"] >= 1 and view["status"] == "running" else None

        view = wait_until(recovered, 60, "the job to run again after the preemption")
        assert view["attempt"] >= 2, view["events"]
        assert any(e["kind"] == "preemption" for e in view["events"]), view["events"]
        pool = api.pool_status("spotty")
        busy = [n for n in pool["nodes"] if n["state"] == "busy"]
        assert len(busy) == 1 and busy[0]["job_id"] == job_id, pool["nodes"]
        assert busy[0]["pricing"] == "spot" and busy[0]["name"] != first  # a new node
        assert all(n["state"] == "leaving" for n in pool["nodes"] if n["name"] == first)
        assert pool["status"] == "ready" and pool["desired_nodes"] <= 2, pool
        grew = [d for d in pool["decisions"] if d["add"] and d["waiting"]]
        assert grew, pool["decisions"]  # the pool launched a node for the recovering job

        wait_until(lambda: api.job(job_id)["status"] == "succeeded" or None, 60, "the job to end")
        lines = log.read_text().splitlines()
        resumed = [int(x.split()[-1]) for x in lines if x.startswith("resumed from")]
        assert resumed[0] == 0 and len(resumed) >= 2, lines
        assert any(line.startswith("stopped at") for line in lines), lines
        assert resumed[-1] > 0, lines  # the checkpoint was kept across the preemption
        assert lines[-1] == f"done at {resumed[-1] + AFTER}", lines

        def settled() -> dict[str, Any] | None:
            pool = api.pool_status("spotty")
            states = [n["state"] for n in pool["nodes"]]
            return pool if states == ["idle"] else None

        pool = wait_until(settled, 30, "one idle node left (the preempted one gone)")
        assert pool["desired_nodes"] == 1 and pool["waiting_jobs"] == []
        (second,) = [n["name"] for n in pool["nodes"]]
        assert second != first

        seen = tmp_path / "seen"  # a job that fails: its node goes back idle, cleaned
        failing = {"name": "fails", "resources": {"pool": "spotty"},
                   "run": f'ls -A "$GPULEASE_CHECKPOINT_DIR" > {seen}; exit 3'}  # fmt: skip
        failed_id = api.job_launch(failing)["id"]
        wait_until(lambda: api.job(failed_id)["status"] == "failed" or None, 30, "it to fail")
        assert seen.read_text() == ""  # the previous job's checkpoints were not left for it
        assert [n["name"] for n in wait_until(settled, 30, "the node idle again")["nodes"]] == [
            second
        ]
        naps = f"600.{os.getpid()}"  # a cancelled job: its task stopped, its node back idle
        sleeper = {"name": "sleeps", "resources": {"pool": "spotty"}, "run": f"sleep {naps}"}
        cancelled_id = api.job_launch(sleeper)["id"]
        wait_until(lambda: _sleeping(naps) or None, 30, "it to run")
        api.job_cancel(cancelled_id)
        wait_until(lambda: api.job(cancelled_id)["status"] == "cancelled" or None, 30, "cancel")
        assert _sleeping(naps) == []  # stopped before the node was handed back
        pool = wait_until(settled, 30, "the node idle after the cancel")
        assert [n["name"] for n in pool["nodes"]] == [second]  # reused, never torn down
        text = user("pool", "status", "spotty", check=True).stdout
        assert "pool spotty: ready" in text
        user("pool", "down", "spotty", check=True)
        wait_until(lambda: api.pool_status("spotty")["status"] == "down" or None, 30, "pool down")
    records = json.loads((user.home / "sim" / "sim.json").read_text()).values()
    assert any(r["spot"] and r["preempted"] for r in records)  # the sim's own record
    nodes = LocalProvider(user.home / "sim" / "local")
    assert all(i.state is InstanceState.TERMINATED for i in nodes.list_instances({}))
