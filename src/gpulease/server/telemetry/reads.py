"""The read API's answers (``GET /v1/clusters/{name}/telemetry``, ``GET /v1/jobs/{id}/telemetry``,
``GET /v1/telemetry/latest``): JSON views of the stored points and the newest raw samples.

Owns :class:`TelemetryReader` and the checks of the ``since`` / ``resolution`` parameters (a bad
one is a :class:`~gpulease.errors.UserInputError` naming it: 422). An unknown cluster or job is
:class:`~gpulease.server.service.NotFound` (404). Moves no states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpulease.clock import Clock
from gpulease.errors import UserInputError
from gpulease.server.service import NotFound
from gpulease.server.telemetry.fold import RESOLUTIONS, gpu_utilisations
from gpulease.server.telemetry.latest import LatestSamples
from gpulease.server.telemetry.settings import TelemetrySettings
from gpulease.server.telemetry.store import read_points
from gpulease.state import get_cluster_by_name, get_job, session_scope
from gpulease.state.machines import ClusterStatus
from gpulease.state.models import Cluster, TelemetryPoint

DEFAULT_WINDOW_S = 3600.0


def parse_since(value: str | None, now: float) -> float:
    """``since`` (Unix seconds) of a query; default an hour ago."""
    if value is None or value == "":
        return now - DEFAULT_WINDOW_S
    try:
        since = float(value)
    except ValueError:
        raise UserInputError(f"since: Unix time in seconds, not {value!r}") from None
    if not math.isfinite(since) or since < 0:
        raise UserInputError(f"since: Unix time in seconds, not {value!r}")
    return since


def parse_resolution(value: str | None) -> int | None:
    """``resolution`` of a query: 10 or 60 (seconds), or None for the default."""
    if value is None or value == "":
        return None
    if value.strip() in {str(r) for r in RESOLUTIONS}:
        return int(value)
    raise UserInputError(f"resolution: 10 or 60 (seconds), not {value!r}")


def point_view(point: TelemetryPoint) -> dict[str, Any]:
    return {"at": point.at, "samples": point.samples, "gpus": [], "node": None, "train": None,
            "peers": [], **point.data}  # fmt: skip


def _nodes(points: Sequence[TelemetryPoint], *, with_cluster: bool) -> list[dict[str, Any]]:
    nodes: dict[tuple[int, int], dict[str, Any]] = {}
    for point in points:
        key = (point.cluster_id, point.node_rank)
        entry = nodes.get(key)
        if entry is None:
            entry = {"node_rank": point.node_rank, "points": []}
            if with_cluster:
                entry = {"cluster": point.cluster_name, **entry}
            nodes[key] = entry
        entry["points"].append(point_view(point))
    return list(nodes.values())


class TelemetryReader:
    def __init__(
        self,
        engine: Engine,
        settings: TelemetrySettings,
        latest: LatestSamples,
        *,
        clock: Clock,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.latest = latest
        self.clock = clock

    def _window(self, since: str | None, resolution: str | None) -> tuple[float, int]:
        now = self.clock.now()
        start = parse_since(since, now)
        chosen = parse_resolution(resolution)
        return start, chosen or self.settings.default_resolution(start, now)

    def cluster(
        self, name: str, since: str | None = None, resolution: str | None = None
    ) -> dict[str, Any]:
        start, res = self._window(since, resolution)
        with session_scope(self.engine) as session:
            cluster_id = _cluster_id(session, name)
            points = read_points(session, resolution_s=res, since=start, cluster_ids=[cluster_id])
            nodes = _nodes(points, with_cluster=False)
        return {"cluster": name, "resolution_s": res, "since": start, "nodes": nodes}

    def job(
        self, job_id: int, since: str | None = None, resolution: str | None = None
    ) -> dict[str, Any]:
        start, res = self._window(since, resolution)
        with session_scope(self.engine) as session:
            if get_job(session, job_id) is None:
                raise NotFound(f"no managed job with id {job_id}")
            points = read_points(session, resolution_s=res, since=start, job_id=job_id)
            nodes = _nodes(points, with_cluster=True)
        return {"job_id": job_id, "resolution_s": res, "since": start, "nodes": nodes}

    def latest_view(self, cluster: str | None = None) -> dict[str, Any]:
        now = self.clock.now()
        with session_scope(self.engine) as session:
            stmt = select(Cluster).where(Cluster.status != ClusterStatus.TERMINATED)
            if cluster is not None:
                if get_cluster_by_name(session, cluster) is None:
                    raise NotFound(f"no cluster named {cluster!r}")
                stmt = stmt.where(Cluster.name == cluster)
            live = [_cluster_head(c) for c in session.scalars(stmt.order_by(Cluster.id))]
        views = []
        for cluster_id, head in live:
            nodes = [
                {"node_rank": n.node_rank, "age_s": max(0.0, now - n.at), "sample": dict(n.sample)}
                for n in self.latest.of_cluster(cluster_id)
            ]
            mean = _mean_util(n["sample"] for n in nodes)
            views.append({**head, "gpu_utilization_pct": mean, "nodes": nodes})
        return {"clusters": views}


def _cluster_id(session: Session, name: str) -> int:
    """The id of the cluster called ``name`` now, else of the newest one whose points carry the
    name (its row gone, its history kept); NotFound when neither."""
    cluster = get_cluster_by_name(session, name)
    if cluster is not None:
        return cluster.id
    found = session.scalar(
        select(TelemetryPoint.cluster_id)
        .where(TelemetryPoint.cluster_name == name)
        .order_by(TelemetryPoint.cluster_id.desc())
        .limit(1)
    )
    if found is None:
        raise NotFound(f"no cluster named {name!r}")
    return int(found)


def _cluster_head(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    return cluster.id, {
        "cluster": cluster.name,
        "job_id": cluster.job_id,
        "provider": cluster.provider,
        "region": cluster.region,
        "instance_type": cluster.instance_type,
        "spot": bool(cluster.spot),
        "price_per_hour": cluster.price_per_hour,
    }


def _mean_util(samples: Any) -> float | None:
    values = [u for sample in samples for u in gpu_utilisations(_as_mapping(sample))]
    return math.fsum(values) / len(values) if values else None


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
