"""The cost ledger's accrual per pass, with 1,000 running nodes, on SQLite and PostgreSQL.

For each database: the migrated schema gets ``--nodes`` READY nodes (one cluster each, on the
real local provider priced at $1/GPU-hour), and one untimed pass of the real
:class:`gpulease.controller.accrual.Accrual` opens their ledger rows. Then, in the same run,
timed as medians of ``--repeat``:

- the baseline: a plain ``SELECT`` of the same rows (every column of the open ledger rows,
  joined to their nodes, fetched to Python) — what reading them costs at all;
- steady passes: ``--passes`` passes 0.5 s of clock apart (the server loop's interval), as a
  running install makes them: each advances the slices of rows whose tick has come
  (:mod:`gpulease.controller.accrual_ticks`: about a tenth of the rows every ``ADVANCE_EVERY_S``
  / 10) — mean, median and max per pass, and the rows each wrote;
- the first pass after a start (a new :class:`Accrual`): every slice at once, all 1,000 rows
  in one UPDATE — the worst pass.

Usage: ``.venv/bin/python benchmarks/cost/accrual.py [--nodes 1000] [--db sqlite,postgresql]
[--passes 200]``.
Writes ``benchmarks/cost/results/accrual-<db>.json`` and prints a Markdown table. Target (issue
16): < 5 ms per 1,000 running nodes per pass.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.cost.databases import database  # noqa: E402
from benchmarks.cost.harness import Result, each_database, markdown_table, median_s  # noqa: E402
from benchmarks.cost.synthetic import analyze, closed_history  # noqa: E402
from sqlalchemy import Engine, insert, select, text  # noqa: E402

from gpulease.clock import VirtualClock  # noqa: E402
from gpulease.controller.accrual import ADVANCE_EVERY_S, Accrual  # noqa: E402
from gpulease.providers.local import LocalProvider  # noqa: E402
from gpulease.state import ClusterStatus, NodeState, upgrade  # noqa: E402
from gpulease.state.models import Cluster, LedgerEntry, Node  # noqa: E402

START = 1_780_000_000.0
PASS_INTERVAL_S = 0.5  # the server loop's pass interval (server/runtime.py LoopThread)


def seed(engine: Engine, nodes: int, now: float) -> None:
    """``nodes`` READY nodes, one cluster each, on the local provider."""
    common = dict(status_changed_at=now, created_at=now, updated_at=now)
    clusters = [dict(name=f"bench-{i}", owner="bench", status=ClusterStatus.RUNNING,
                     provider="local", gpus_per_node=1, num_nodes=1, pricing="on_demand",
                     price_per_hour=1.0,
                     task={"spec": {"name": f"task-{i % 50}"}}, autostop_down=False,
                     failover_history=[], region="local", instance_type="local-1",
                     accelerator="T4", **common)
                for i in range(1, nodes + 1)]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(Cluster), clusters)
        ids = conn.execute(select(Cluster.id).order_by(Cluster.id)).scalars().all()
        conn.execute(insert(Node), [dict(cluster_id=cid, node_rank=0, instance_id=f"bench-{cid}",
                                         provider="local", state=NodeState.READY,
                                         missed_heartbeats=0, **common)
                                    for cid in ids])  # fmt: skip


def bench(kind: str, engine: Engine, root: Path, args: Any) -> dict[str, Any]:
    upgrade(engine)
    clock = VirtualClock(START)
    seed(engine, args.nodes, clock.now())
    if args.history:  # closed rows of nodes long gone, as a ledger in use has
        closed_history(engine, args.history, clock.now(), node_offset=10 * args.nodes)
    provider = LocalProvider(root, clock=clock, price_per_gpu_hour=1.0)
    accrual = Accrual(engine, {"local": provider}, clock, user="bench")
    opened = accrual.run()  # opens the rows (the slow path, node by node): untimed
    analyze(engine)  # as autovacuum / a later ANALYZE would, once the rows are open
    with engine.connect() as conn:
        open_rows = conn.execute(
            select(text("count(*)")).select_from(LedgerEntry).where(LedgerEntry.closed.is_(False))
        ).scalar_one()

    def baseline() -> None:
        stmt = select(Node, LedgerEntry).join(
            LedgerEntry, (LedgerEntry.node_id == Node.id) & LedgerEntry.closed.is_(False)
        )
        with engine.connect() as conn:
            assert len(conn.execute(stmt).all()) == open_rows

    baseline()  # a first read, untimed
    per = 1000.0 / args.nodes * 1000.0  # seconds → ms per 1,000 nodes
    out: dict[str, Any] = {"db": kind, "nodes": args.nodes, "closed_rows": args.history,
                           "opened": opened, "open_rows": open_rows}  # fmt: skip
    out["baseline_select_ms_per_1000"] = median_s(baseline, args.repeat) * per
    times, written = steady(accrual, clock, args.passes)
    out["steady_pass_interval_s"] = PASS_INTERVAL_S
    out["steady_passes"] = len(times)
    out["steady_pass_mean_ms_per_1000"] = statistics.fmean(times) * per
    out["steady_pass_median_ms_per_1000"] = statistics.median(times) * per
    out["steady_pass_max_ms_per_1000"] = max(times) * per
    out["steady_rows_written_per_pass_mean"] = statistics.fmean(written)
    out["steady_rows_written_per_pass_max"] = max(written)
    with engine.connect() as conn:  # how far behind the clock the open rows are
        oldest = conn.execute(
            select(text("min(ended_at)"))
            .select_from(LedgerEntry)
            .where(LedgerEntry.closed.is_(False))
        ).scalar_one()
    out["steady_open_rows_max_lag_s"] = clock.now() - float(oldest)

    def first_pass() -> None:  # a server just started: every slice is due at once
        clock.advance(ADVANCE_EVERY_S)
        fresh = Accrual(engine, {"local": provider}, clock, user="bench")
        written.append(fresh.run())

    written = []
    out["first_pass_after_start_ms_per_1000"] = median_s(first_pass, args.repeat) * per
    out["first_pass_rows_written"] = written[-1]
    return out


def steady(accrual: Accrual, clock: VirtualClock, passes: int) -> tuple[list[float], list[int]]:
    """``passes`` passes ``PASS_INTERVAL_S`` of clock apart (the server loop's interval), after
    one period of ``ADVANCE_EVERY_S`` untimed: each pass's seconds and rows written."""
    for _ in range(int(ADVANCE_EVERY_S / PASS_INTERVAL_S)):
        clock.advance(PASS_INTERVAL_S)
        accrual.run()
    times: list[float] = []
    written: list[int] = []
    for _ in range(passes):
        clock.advance(PASS_INTERVAL_S)
        began = time.perf_counter()
        written.append(accrual.run())
        times.append(time.perf_counter() - began)
    return times, written


def run(kind: str, args: Any) -> dict[str, Any]:
    with database(kind, "accrual-bench") as (engine, _url, folder):
        return bench(kind, engine, folder / "local", args)


def table(results: list[Result]) -> str:
    keys = [k for k in results[0] if k.endswith("_ms_per_1000")]
    rows = [
        (key.removesuffix("_ms_per_1000"), [f"{r[key]:.1f} ms" for r in results]) for key in keys
    ]
    return markdown_table("measurement (ms per 1,000 nodes)", results, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--passes", type=int, default=200)
    parser.add_argument("--history", type=int, default=300_000, help="closed rows beside")
    each_database(parser, run, table, prefix="accrual-")


if __name__ == "__main__":
    main()
