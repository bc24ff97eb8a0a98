"""A synthetic cost ledger for the benchmark: ``n`` rows of ``ledger_entries`` (the real schema,
migrated by alembic) over the 60 days before ``now``, with clusters, jobs (with plan
estimates), tasks, providers, regions, parts, spot and on-demand, users, volumes and storage, and
the last rows still open. Deterministic for a seed. SQLite takes the rows by ``executemany``
(then ``ANALYZE``), PostgreSQL by ``COPY`` (then ``VACUUM ANALYZE``). The daily rollup
(``ledger_days``) is then built by the ledger writer's own statements over every closed row
(:func:`gpulease.state.ledger.rebuild_days`: what the writer adds as it closes each row)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, insert

from gpulease.state.ledger import rebuild_days
from gpulease.state.models import Cluster, Job, LedgerEntry

DAY = 86400.0
SPAN_DAYS = 60
CLUSTERS, JOBS, OPEN = 2000, 500, 1000
PROVIDERS = {"aws": ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1"],
             "sim": ["sim-east", "sim-west"], "local": ["local"],
             "slurm": ["site-a", "site-b"]}  # fmt: skip
PARTS = ["A100", "H100", "L4", "T4", "A10G", "V100", "L40S", "H200"]
COLUMNS = [c.name for c in LedgerEntry.__table__.columns if c.name != "id"]


def rows(n: int, now: float, seed: int = 0) -> Iterator[tuple[Any, ...]]:
    """The rows as tuples in :data:`COLUMNS` order."""
    rnd = random.Random(seed)
    regions = [(p, r) for p, rs in PROVIDERS.items() for r in rs]
    start = now - SPAN_DAYS * DAY
    for i in range(n):
        length = rnd.uniform(600.0, 6 * 3600.0)
        began = start + (SPAN_DAYS * DAY - length) * i / n
        is_open = i >= n - OPEN
        ended = now - rnd.uniform(0, 60) if is_open else began + length
        kind = rnd.choices(["instance", "volume", "storage"], [90, 7, 3])[0]
        provider, region = regions[rnd.randrange(len(regions))]
        spot = kind == "instance" and rnd.random() < 0.4
        gpus = rnd.choice([1, 2, 4, 8]) if kind == "instance" else 0
        price = (
            rnd.uniform(0.5, 4.0) * max(gpus, 1) if kind == "instance" else rnd.uniform(0.01, 0.2)
        )
        on_demand = (
            price / rnd.uniform(0.3, 0.7) if spot else (price if kind == "instance" else None)
        )
        cluster = rnd.randrange(1, CLUSTERS + 1) if kind != "storage" else None
        job = (cluster % JOBS) + 1 if cluster is not None and cluster % 3 == 0 else None
        billed = ended - began
        row = {
            "entry_key": f"{kind}:{i}:{began}", "kind": kind, "node_id": i,
            "instance_id": f"i-{i:08x}", "cluster_id": cluster,
            "cluster_name": None if cluster is None else f"cluster-{cluster}", "job_id": job,
            "service": None, "task_name": f"task-{rnd.randrange(50)}",
            "user": f"user-{rnd.randrange(20)}", "provider": provider, "region": region,
            "zone": f"{region}a", "instance_type": f"type-{gpus}",
            "accelerator": PARTS[rnd.randrange(len(PARTS))] if gpus else None,
            "gpu_count": gpus, "pricing": "spot" if spot else "on_demand",
            "price_per_hour": price, "on_demand_price_per_hour": on_demand,
            "quoted_per_hour": price, "quantity": None if kind == "instance" else 100.0,
            "billing": "second:60", "run_started_at": began, "started_at": began,
            "ended_at": ended, "closed": not is_open, "billed_s": billed,
            "cost_usd": price * billed / 3600.0, "created_at": began, "updated_at": ended,
        }  # fmt: skip
        yield tuple(row[c] for c in COLUMNS)


def fill(engine: Engine, n: int, now: float, seed: int = 0) -> None:
    """Insert the ledger rows and the clusters / jobs they name (with plan estimates)."""
    _runs(engine, now)
    insert_rows(engine, rows(n, now, seed))
    with engine.begin() as conn:
        rebuild_days(conn)
    analyze(engine)


def closed_history(engine: Engine, n: int, now: float, *, node_offset: int) -> None:
    """``n`` closed rows of nodes long gone (ids from ``node_offset``): the history a ledger
    has beside its open rows (for the accrual's benchmark; no rollup)."""
    at = {name: COLUMNS.index(name) for name in ("closed", "node_id")}

    def closed() -> Iterator[tuple[Any, ...]]:
        for row in rows(n, now):
            values = list(row)
            values[at["closed"]] = True
            values[at["node_id"]] = node_offset + values[at["node_id"]]
            yield tuple(values)

    insert_rows(engine, closed())
    analyze(engine)


def insert_rows(engine: Engine, found: Iterator[tuple[Any, ...]]) -> None:
    """Rows in :data:`COLUMNS` order: PostgreSQL by ``COPY``, SQLite by ``executemany``."""
    names = ", ".join(f'"{c}"' for c in COLUMNS)
    raw = engine.raw_connection()
    try:
        cur = raw.cursor()
        if engine.dialect.name == "postgresql":
            with cur.copy(f"COPY ledger_entries ({names}) FROM STDIN") as copy:  # type: ignore[attr-defined]
                for row in found:
                    copy.write_row(row)
        else:
            sql = f"INSERT INTO ledger_entries ({names}) VALUES ({', '.join('?' for _ in COLUMNS)})"
            batch: list[tuple[Any, ...]] = []
            for row in found:
                batch.append(row)
                if len(batch) == 50_000:
                    cur.executemany(sql, batch)
                    batch.clear()
            if batch:
                cur.executemany(sql, batch)
        raw.commit()
    finally:
        raw.close()


def analyze(engine: Engine) -> None:
    """Statistics (and, on PostgreSQL, the visibility map: what autovacuum does on a live
    install, so index-only scans skip the heap)."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE")
    else:
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def _runs(engine: Engine, now: float) -> None:
    common = dict(owner="bench", status_changed_at=now, created_at=now, updated_at=now)
    clusters = [dict(name=f"cluster-{i}", status="terminated", provider="aws", gpus_per_node=8,
                     num_nodes=1, pricing="on_demand", price_per_hour=10.0, task={},
                     autostop_down=False, failover_history=[], **common)
                for i in range(1, CLUSTERS + 1)]  # fmt: skip
    doc = {"policy": {"job_s": 36000.0, "use_spot": "auto"}, "task_id": "t",
           "spot": [{"provider": "aws", "price_per_hour": 12.0}], "on_demand": []}  # fmt: skip
    jobs = [dict(name=f"job-{i}", status="succeeded", task=doc, clock="system", attempt=1,
                 recoveries=0, restarts=0, blocked=[], events=[], cost_usd=0.0, run_s=0.0,
                 started_at_job=now, cancel_requested=False, **common)
            for i in range(1, JOBS + 1)]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(insert(Cluster), clusters)
        conn.execute(insert(Job), jobs)
