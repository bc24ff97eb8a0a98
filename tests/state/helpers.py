"""Helpers shared by the state tests (not fixtures)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Engine, update

from gpulease.clock import VirtualClock
from gpulease.state import LaunchTarget, Status, create_cluster, session_scope
from gpulease.state.models import Cluster, LaunchIntent, Node

TARGET = LaunchTarget(
    provider="sim",
    region="us-east-1",
    zone="us-east-1a",
    instance_type="p4d.24xlarge",
    accelerator="A100",
    gpus_per_node=8,
    num_nodes=2,
    pricing="spot",
    price_per_hour=40.0,
)


def new_cluster(engine: Engine, clock: VirtualClock, name: str | None = None) -> tuple[int, str]:
    """Create a PENDING cluster and its intent; return (cluster id, request id)."""
    with session_scope(engine) as session:
        cluster, intent = create_cluster(
            session,
            name=name or f"c-{uuid.uuid4().hex[:10]}",
            target=TARGET,
            task={"name": "t", "run": "python train.py", "num_nodes": 2},
            owner="gl-test",
            actor="test",
            now=clock.now(),
        )
        return cluster.id, intent.request_id


def force_status(
    engine: Engine,
    model: type[Cluster | Node | LaunchIntent],
    row_id: int,
    status: Status,
    *,
    at: float | None = None,
) -> None:
    """Put a row straight into ``status`` (test set-up only: bypasses the transition table)."""
    column = "state" if model is Node else "status"
    values: dict[str, Any] = {column: status}
    if at is not None:
        values["status_changed_at"] = at
    with session_scope(engine) as session:
        session.execute(update(model).where(model.id == row_id).values(values))
