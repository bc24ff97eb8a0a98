"""Ledger rows for the cost tests and benchmarks, inserted through the real schema (the
``ledger_entries`` table of the migrated DB); the ledger's writer is not under test here. The
daily rollup (``ledger_days``) is rebuilt after each insert by the writer's own statements
(:func:`gpulease.state.ledger.rebuild_days`), as if the writer had closed each closed row."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, insert

from gpulease.state.ledger import rebuild_days
from gpulease.state.models import LedgerEntry

_KEYS = itertools.count(1)


def entry(
    started_at: float, ended_at: float, price_per_hour: float, **fields: Any
) -> dict[str, Any]:
    """One row billed per second at ``price_per_hour`` (``cost_usd`` = price × billed hours)."""
    billed_s = fields.pop("billed_s", ended_at - started_at)
    row: dict[str, Any] = {
        "entry_key": f"instance:{next(_KEYS)}:{started_at}",
        "kind": "instance",
        "user": "alice",
        "provider": "aws",
        "region": "us-east-1",
        "zone": "us-east-1a",
        "instance_type": "p4d.24xlarge",
        "accelerator": "A100",
        "gpu_count": 8,
        "pricing": "on_demand",
        "on_demand_price_per_hour": None,
        "quantity": None,
        "billing": "second:60",
        "closed": True,
        "cluster_name": "c1",
        "cluster_id": 1,
        "task_name": "train",
        "created_at": started_at,
        "updated_at": ended_at,
        "run_started_at": started_at,
        **fields,
        "started_at": started_at,
        "ended_at": ended_at,
        "price_per_hour": price_per_hour,
        "billed_s": billed_s,
    }
    row.setdefault("cost_usd", price_per_hour * billed_s / 3600.0)
    return row


def insert_rows(target: Engine | Connection, rows: Iterable[dict[str, Any]]) -> None:
    batch = list(rows)
    if not batch:
        return
    if isinstance(target, Engine):
        with target.begin() as conn:
            conn.execute(insert(LedgerEntry), batch)
            rebuild_days(conn)
    else:
        target.execute(insert(LedgerEntry), batch)
        rebuild_days(target)
