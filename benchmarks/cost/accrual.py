"""The cost ledger's accrual per pass, with 1,000 running nodes, on SQLite and PostgreSQL.

For each database: the migrated schema gets ``--nodes`` READY nodes (one cluster each, on the
real local provider priced at $1/GPU-hour), and one untimed pass of the real
:class:`gpulease.controller.accrual.Accrual` opens their ledger rows. Then, in the same run,
timed as medians of ``--repeat``:

- the baseline: a plain ``SELECT`` of the same rows (every column of the open ledger rows,
  joined to their nodes, fetched to Python) — what reading them costs at all;
- a writing pass: the clock moved on by ``ADVANCE_EVERY_S``, so every open row is advanced
  (the common busy pass: one batch of UPDATEs);
- a quiet pass: the clock moved on by less than ``ADVANCE_EVERY_S``, so the pass reads and
  writes nothing (most passes of a steady install).

Usage: ``.venv/bin/python benchmarks/cost/accrual.py [--nodes 1000] [--db sqlite,postgresql]``.
Writes ``benchmarks/cost/results/accrual-<db>.json`` and prints a Markdown table. Target (issue
16): < 5 ms per 1,000 running nodes per pass.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import Engine, insert, select, text  # noqa: E402

from gpulease.clock import VirtualClock  # noqa: E402
from gpulease.controller.accrual import ADVANCE_EVERY_S, Accrual  # noqa: E402
from gpulease.providers.local import LocalProvider  # noqa: E402
from gpulease.state import ClusterStatus, NodeState, make_engine, upgrade  # noqa: E402
from gpulease.state.models import Cluster, LedgerEntry, Node  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
START = 1_780_000_000.0


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


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
    provider = LocalProvider(root, clock=clock, price_per_gpu_hour=1.0)
    accrual = Accrual(engine, {"local": provider}, clock, user="bench")
    opened = accrual.run()  # opens the rows (the slow path, node by node): untimed
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

    written: list[int] = []

    def busy() -> None:
        clock.advance(ADVANCE_EVERY_S)
        written.append(accrual.run())

    def quiet() -> None:  # every quiet pass of the run stays inside one ADVANCE_EVERY_S
        clock.advance(ADVANCE_EVERY_S / (args.repeat + 2))
        written.append(accrual.run())

    baseline()  # a first read, untimed
    per = 1000.0 / args.nodes * 1000.0  # seconds → ms per 1,000 nodes
    out: dict[str, Any] = {"db": kind, "nodes": args.nodes, "opened": opened,
                           "open_rows": open_rows}  # fmt: skip
    out["baseline_select_ms_per_1000"] = timed(baseline, args.repeat) * per
    out["pass_advancing_all_ms_per_1000"] = timed(busy, args.repeat) * per
    out["rows_written_per_busy_pass"] = written[-1]
    written.clear()
    busy()  # leaves every row just advanced, so the quiet passes have nothing to write
    written.clear()
    out["pass_quiet_ms_per_1000"] = timed(quiet, args.repeat) * per
    out["rows_written_per_quiet_pass"] = max(written)
    return out


def run_sqlite(args: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpulease-accrual-bench-") as tmp:
        engine = make_engine(f"sqlite:///{Path(tmp) / 'state.db'}")
        try:
            return bench("sqlite", engine, Path(tmp) / "local", args)
        finally:
            engine.dispose()


def run_postgresql(args: Any) -> dict[str, Any]:
    from tests.state.postgres import new_server, unavailable_reason

    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"PostgreSQL: {reason}")
    server = new_server(f"accrualbench-{os.getpid()}")
    server.start()
    try:
        engine = make_engine(server.create_database("accrualbench"))
        with tempfile.TemporaryDirectory(prefix="gpulease-accrual-bench-") as tmp:
            try:
                return bench("postgresql", engine, Path(tmp) / "local", args)
            finally:
                engine.dispose()
    finally:
        server.stop()


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| measurement (ms per 1,000 nodes) | " + " | ".join(r["db"] for r in results) + " |",
             "|---|" + "---:|" * len(results)]  # fmt: skip
    for key in [k for k in results[0] if k.endswith("_ms_per_1000")]:
        cells = [f"{r[key]:.1f} ms" for r in results]
        lines.append(f"| {key.removesuffix('_ms_per_1000')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--db", default="sqlite,postgresql")
    args = parser.parse_args()
    RESULTS.mkdir(exist_ok=True)
    results = []
    for kind in args.db.split(","):
        found = run_sqlite(args) if kind == "sqlite" else run_postgresql(args)
        (RESULTS / f"accrual-{kind}.json").write_text(json.dumps(found, indent=2) + "\n")
        print(json.dumps(found), flush=True)
        results.append(found)
    print(table(results))


if __name__ == "__main__":
    main()
