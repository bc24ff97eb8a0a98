"""The ``telemetry_points`` table's reads and writes (``state.models.TelemetryPoint``).

Owns :func:`upsert_points` (one row per cluster, node, resolution and bucket: an insert that
replaces the row already there on the unique key — ``ON CONFLICT DO UPDATE`` on SQLite and
PostgreSQL alike — so writing a bucket again, folded from more of its samples, is idempotent),
:func:`prune` (retention), :func:`resume_points` (where the relay picks up after a restart) and
:func:`read_points` (the read API's query). Moves no states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpulease.state.models import TelemetryPoint

_KEY = ["cluster_id", "node_rank", "resolution_s", "at"]
_REPLACED = ("cluster_name", "job_id", "samples", "data")


@dataclass(frozen=True, slots=True)
class PointRow:
    """One bucket of one node, as written."""

    cluster_id: int
    cluster_name: str
    job_id: int | None
    node_rank: int
    resolution_s: int
    at: float
    samples: int
    data: Mapping[str, Any]

    def values(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "cluster_name": self.cluster_name,
                "job_id": self.job_id, "node_rank": self.node_rank,
                "resolution_s": self.resolution_s, "at": self.at, "samples": self.samples,
                "data": dict(self.data)}  # fmt: skip


def upsert_points(session: Session, rows: Sequence[PointRow]) -> int:
    """Insert ``rows``, replacing a row already stored for the same bucket; how many."""
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    values = [row.values() for row in rows]
    if dialect == "sqlite":
        lite = sqlite.insert(TelemetryPoint).values(values)
        session.execute(lite.on_conflict_do_update(
            index_elements=_KEY, set_={n: lite.excluded[n] for n in _REPLACED}))  # fmt: skip
    elif dialect == "postgresql":
        pg = postgresql.insert(TelemetryPoint).values(values)
        session.execute(pg.on_conflict_do_update(
            index_elements=_KEY, set_={n: pg.excluded[n] for n in _REPLACED}))  # fmt: skip
    else:
        raise RuntimeError(f"telemetry points: no upsert for the {dialect} dialect")
    return len(rows)


def prune(session: Session, retention_s: Mapping[int, float], now: float) -> int:
    """Delete each resolution's points older than its retention (by bucket start); how many.
    Points of a resolution not named are kept."""
    deleted = 0
    for resolution, keep_s in sorted(retention_s.items()):
        result = session.execute(
            delete(TelemetryPoint).where(
                TelemetryPoint.resolution_s == resolution, TelemetryPoint.at < now - keep_s
            )
        )
        deleted += int(getattr(result, "rowcount", 0) or 0)
    return deleted


def resume_points(
    session: Session, cluster_ids: Iterable[int], resolution_s: int
) -> dict[tuple[int, int], float]:
    """Per (cluster id, node rank): the start of its newest stored bucket at ``resolution_s``."""
    ids = sorted(set(cluster_ids))
    if not ids:
        return {}
    stmt = (
        select(TelemetryPoint.cluster_id, TelemetryPoint.node_rank, func.max(TelemetryPoint.at))
        .where(TelemetryPoint.cluster_id.in_(ids), TelemetryPoint.resolution_s == resolution_s)
        .group_by(TelemetryPoint.cluster_id, TelemetryPoint.node_rank)
    )
    return {(int(c), int(r)): float(at) for c, r, at in session.execute(stmt)}


def read_points(
    session: Session,
    *,
    resolution_s: int,
    since: float,
    cluster_ids: Sequence[int] | None = None,
    job_id: int | None = None,
) -> list[TelemetryPoint]:
    """The points of the clusters (or of the job) from ``since`` on (buckets ending after it),
    ordered by cluster, node and time."""
    stmt = select(TelemetryPoint).where(
        TelemetryPoint.resolution_s == resolution_s,
        TelemetryPoint.at > since - resolution_s,
    )
    if cluster_ids is not None:
        stmt = stmt.where(TelemetryPoint.cluster_id.in_(list(cluster_ids)))
    if job_id is not None:
        stmt = stmt.where(TelemetryPoint.job_id == job_id)
    stmt = stmt.order_by(TelemetryPoint.cluster_id, TelemetryPoint.node_rank, TelemetryPoint.at)
    return list(session.scalars(stmt))
