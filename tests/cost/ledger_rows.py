"""Seeding ``ledger_entries`` rows through the real schema (the budget tests' input)."""

from __future__ import annotations

import itertools

from sqlalchemy import Engine

from gpulease.state import session_scope
from gpulease.state.models import LedgerEntry

_keys = itertools.count()


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
    with session_scope(engine) as session:
        session.add(
            LedgerEntry(
                entry_key=f"instance:test:{next(_keys)}",
                kind="instance",
                node_id=None,
                instance_id="i-1",
                cluster_id=None,
                cluster_name=cluster_name,
                job_id=None,
                service=None,
                task_name=task_name,
                user=user,
                provider=provider,
                region="local",
                zone=None,
                instance_type="local-gpu",
                accelerator="A100",
                gpu_count=1,
                pricing="on_demand",
                price_per_hour=cost_usd * 3600 / seconds if seconds > 0 else 0.0,
                on_demand_price_per_hour=None,
                quantity=None,
                billing="second",
                run_started_at=started_at,
                started_at=started_at,
                ended_at=ended_at,
                closed=True,
                billed_s=seconds,
                cost_usd=cost_usd,
                created_at=started_at,
                updated_at=ended_at,
            )
        )
