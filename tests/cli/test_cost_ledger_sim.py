"""The cost ledger end to end on the sim provider in scaled time (120×), through the CLI and a real
server: a spot job is preempted once (a spot-availability trace) and its second attempt lives
through a spot price change and a server killed (SIGKILL) for a while. The ledger's rows equal
the sum, computed here by hand, of price × billed seconds per interval (AWS's rule, the sim's
default: per second, 60 s minimum per run), to the cent; ``jobs show`` says the same; every
node's rows are contiguous (nothing billed twice, no gap across the kill) and closed."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from gpulease.state import make_engine, session_scope
from gpulease.state.models import Cluster, LedgerEntry
from tests.cli.conftest import Cli, configure_sim, show_job, stop_server_and_sim_nodes
from tests.cli.test_jobs_spot_train import write_trace
from tests.server.conftest import wait_until

SCALE = 120.0
CHANGE_H, FACTOR = 0.2, 1.5  # spot ×1.5 from 12 sim minutes (6 s) after the cloud started


@pytest.fixture
def user(cli: Cli, tmp_path: Path) -> Iterator[Cli]:
    trace = tmp_path / "trace.json"
    write_trace(trace, [(1, 5), (0, 2), (1, 600)], gap_s=60)  # spot out from 2.5 s to 3.5 s
    configure_sim(
        cli,
        f"    time_scale: {SCALE}\n    provision_seconds: [30, 30]\n"
        f"    notice_seconds: 60\n    spot_trace: {trace}\n"
        f"    spot_price_changes: [[{CHANGE_H}, {FACTOR}]]\n",
    )
    yield cli
    stop_server_and_sim_nodes(cli)


def _sim_now(home: Path) -> float:
    saved = json.loads((home / "sim" / "clock.json").read_text())
    return float(saved["sim_start"]) + (time.time() - float(saved["real_start"])) * SCALE


def _kill_server(user: Cli) -> None:
    pid = int(json.loads((user.home / "server.json").read_text())["pid"])
    os.kill(pid, signal.SIGKILL)

    def dead() -> bool | None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return None

    wait_until(dead, 10, "the server to die")


def _billed(elapsed: float) -> float:
    """AWS's rule by hand: per second, at least 60 s per run."""
    return 0.0 if elapsed <= 0 else max(60.0, elapsed)


@pytest.mark.slow
def test_the_ledger_bills_a_preempted_spot_job_by_hand_to_the_cent(
    user: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "spot.yaml"
    task.write_text(
        "name: ledgered\nresources:\n  accelerators: T4:1\n  use_spot: true\n"
        "run: |\n  trap 'exit 75' TERM\n  for i in $(seq 1 40); do sleep 0.1; done\n"
    )
    user("jobs", "launch", str(task), "--provider", "sim", "--detach", check=True)

    def second_attempt_runs() -> bool | None:
        view = show_job(user)
        return (view["attempt"] >= 2 and view["status"] == "running") or None

    wait_until(second_attempt_runs, 60, "the job to run again after its preemption")
    killed_at = _sim_now(user.home)
    _kill_server(user)
    time.sleep(1.0)  # two sim minutes with no server
    back_at = _sim_now(user.home)
    wait_until(lambda: show_job(user)["status"] == "succeeded" or None, 60, "the job to end")
    wait_until(lambda: all(a["status"] == "terminated" for a in show_job(user)["attempts"])
               or None, 30, "its clusters to be torn down")  # fmt: skip
    view = show_job(user)
    assert view["recoveries"] >= 1, view["events"]

    origin = float(json.loads((user.home / "sim" / "clock.json").read_text())["sim_start"])
    change_at = origin + CHANGE_H * 3600.0
    engine = make_engine(f"sqlite:///{user.home / 'state.db'}")
    with session_scope(engine) as session:
        rows = list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))
        quotes = {c.id: (c.price_per_hour or 0.0) / c.num_nodes for c in session.scalars(
            select(Cluster))}  # fmt: skip
        session.expunge_all()
    engine.dispose()

    by_node: dict[int | None, list[LedgerEntry]] = defaultdict(list)
    for row in rows:
        by_node[row.node_id].append(row)
    assert len(by_node) >= 2  # one node per attempt
    hand = 0.0
    for node_rows in by_node.values():
        assert all(
            r.closed and r.kind == "instance" and r.billing == "second:60" for r in node_rows
        )
        run = node_rows[0].started_at
        for before, after in itertools.pairwise(node_rows):
            assert after.started_at == before.ended_at  # contiguous: no gap, no overlap
        for row in node_rows:
            assert row.cluster_id is not None
            factor = FACTOR if row.started_at >= change_at else 1.0
            assert row.started_at >= change_at or row.ended_at <= change_at  # split at the change
            price = quotes[row.cluster_id] * factor
            assert row.price_per_hour == pytest.approx(price)
            billed = _billed(row.ended_at - run) - _billed(row.started_at - run)
            hand += price * billed / 3600.0
    assert any(r.started_at == change_at for r in rows), "a row starts at the price change"
    across = [n for n in by_node.values() if n[0].started_at < killed_at < back_at < n[-1].ended_at]
    assert across, "a node lived through the kill: its rows (contiguous) bill those minutes"

    ledger = sum(r.cost_usd for r in rows)
    assert round(ledger, 2) == round(hand, 2)
    assert round(view["cost"]["spent_usd"], 2) == round(hand, 2)
    assert hand > 0
