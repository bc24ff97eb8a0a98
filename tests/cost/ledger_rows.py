"""Seeding ``ledger_entries`` rows through the real schema (the budget tests' input)."""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy import Engine

from gpulease.state import session_scope
from gpulease.state.models import LedgerEntry

_keys = itertools.count()


def ledger_entry(*, started_at: float, ended_at: float, **fields: Any) -> LedgerEntry:
    """A closed ``instance`` row over [started_at, ended_at] (billed every second of it, at
    ``price_per_hour``: $1 by default) with plain defaults for every other column; ``fields``
    override any of them."""
    billed = ended_at - started_at
    price = float(fields.pop("price_per_hour", 1.0))
    row: dict[str, Any] = {
        "entry_key": f"instance:test:{next(_keys)}", "kind": "instance", "node_id": None,
        "instance_id": "i-1", "cluster_id": None, "cluster_name": "c1", "job_id": None,
        "service": None, "task_name": "train", "user": "alice", "provider": "local",
        "region": "local", "zone": None, "instance_type": "local-gpu", "accelerator": "A100",
        "gpu_count": 1, "pricing": "on_demand", "price_per_hour": price,
        "on_demand_price_per_hour": None, "quantity": None, "billing": "second",
        "run_started_at": started_at, "started_at": started_at, "ended_at": ended_at,
        "closed": True, "billed_s": billed, "cost_usd": price * billed / 3600.0,
        "created_at": started_at, "updated_at": ended_at,
    }  # fmt: skip
    row.update(fields)
    return LedgerEntry(**row)


def seed_row(
    engine: Engine,
    *,
    started_at: float,
    ended_at: float,
    cost_usd: float,
    provider: str = "local",
    task_name: str | None = "train",
    user: str = "alice",
    cluster_name: str | None = "c1",
) -> None:
    """One closed instance row billing ``cost_usd`` over [started_at, ended_at]."""
    seconds = ended_at - started_at
    price = cost_usd * 3600 / seconds if seconds > 0 else 0.0
    with session_scope(engine) as session:
        session.add(
            ledger_entry(
                started_at=started_at,
                ended_at=ended_at,
                price_per_hour=price,
                cost_usd=cost_usd,
                provider=provider,
                task_name=task_name,
                user=user,
                cluster_name=cluster_name,
            )
        )
