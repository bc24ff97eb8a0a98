"""The telemetry read API over real HTTP (uvicorn in a thread, the SDK client) on a real SQLite
DB written through the store: a cluster's points per node, a job's over its attempt clusters,
the newest raw samples of the live clusters, the default window and resolution, 404 for an
unknown cluster or job, 422 naming a bad ``since`` / ``resolution``."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.client import Client
from gpulease.clock import VirtualClock
from gpulease.errors import GpuleaseError
from gpulease.server.api import create_app
from gpulease.server.service import ClusterService
from gpulease.server.telemetry import LatestSamples, TelemetryReader, TelemetrySettings
from gpulease.server.telemetry.fold import bucket_start, fold
from gpulease.server.telemetry.store import PointRow, upsert_points
from gpulease.state import ClusterStatus, create_job, session_scope
from gpulease.state.models import Cluster
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.server.test_telemetry_store import T0, sample
from tests.state.helpers import force_status, new_cluster
from tests.waiting import wait_until

TOKEN = "telemetry-t0ken"
NOW = T0 + 600


@dataclass
class Served:
    client: Client
    engine: Engine
    latest: LatestSamples
    clock: VirtualClock


@pytest.fixture
def served(engine: Engine) -> Iterator[Served]:
    clock = VirtualClock(NOW)
    latest = LatestSamples()
    reader = TelemetryReader(engine, TelemetrySettings(), latest, clock=clock)
    service = ClusterService(engine, {"sim": FakeProvider(name="sim")}, FakeAgents(),
                             clock=clock, owner="gl-test")  # fmt: skip
    app = create_app(service, SecretStr(TOKEN), telemetry=reader)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or None, 10, "uvicorn")
    client = Client(f"http://127.0.0.1:{sock.getsockname()[1]}", TOKEN)
    try:
        yield Served(client, engine, latest, clock)
    finally:
        client.close()
        server.should_exit = True
        thread.join(10)
        sock.close()


def _store(engine: Engine, cluster_id: int, name: str, job_id: int | None) -> None:
    rows = []
    for rank in (0, 1):
        for at in (T0, T0 + 10, T0 + 20):
            for res in (10, 60):
                samples = [sample(at, 10.0 * (rank + 1)), sample(at + 5, 10.0 * (rank + 1) + 2)]
                rows.append(PointRow(cluster_id, name, job_id, rank, res,
                                     bucket_start(at, res), 2, fold(samples)))  # fmt: skip
    with session_scope(engine) as session:
        upsert_points(session, rows)


def _job_with_clusters(served: Served) -> tuple[int, list[tuple[int, str]]]:
    with session_scope(served.engine) as session:
        job = create_job(session, name="train", task={}, owner="gl-test", actor="t", now=T0)
        job_id = job.id
    clusters = []
    for attempt in (1, 2):
        name = f"train-{attempt}"
        cluster_id, _ = new_cluster(served.engine, served.clock, name)
        with session_scope(served.engine) as session:
            session.get_one(Cluster, cluster_id).job_id = job_id
        _store(served.engine, cluster_id, name, job_id)
        clusters.append((cluster_id, name))
    return job_id, clusters


def test_a_clusters_points_per_node_at_either_resolution(served: Served) -> None:
    cluster_id, _ = new_cluster(served.engine, served.clock, "c1")
    _store(served.engine, cluster_id, "c1", None)
    view = served.client.telemetry("c1", since=T0 - 100)
    assert view["cluster"] == "c1" and view["resolution_s"] == 10 and view["since"] == T0 - 100
    assert [n["node_rank"] for n in view["nodes"]] == [0, 1]
    points = view["nodes"][1]["points"]
    assert [p["at"] for p in points] == [T0, T0 + 10, T0 + 20]
    assert points[0]["samples"] == 2 and points[0]["gpus"][0]["utilization_pct"] == 21.0
    assert points[0]["node"]["cpu_count"] == 4 and points[0]["train"] is None
    assert points[0]["peers"] == []
    coarse = served.client.telemetry("c1", since=T0 + 15, resolution=60)
    assert coarse["resolution_s"] == 60
    assert [p["at"] for p in coarse["nodes"][0]["points"]] == [T0 - 20]  # the bucket holds T0+15
    default = served.client.telemetry("c1")  # the last hour at 10 s
    assert default["since"] == NOW - 3600 and default["resolution_s"] == 10
    a_moment_ago = served.client.telemetry("c1", since=NOW - 3601)  # "the last hour", said earlier
    assert a_moment_ago["resolution_s"] == 10
    older = served.client.telemetry("c1", since=NOW - 7200)  # past the 10 s retention
    assert older["resolution_s"] == 60


def test_a_jobs_points_span_its_attempt_clusters(served: Served) -> None:
    job_id, clusters = _job_with_clusters(served)
    view = served.client.job_telemetry(job_id, since=T0, resolution=10)
    assert view["job_id"] == job_id and view["resolution_s"] == 10
    names = [(n["cluster"], n["node_rank"]) for n in view["nodes"]]
    assert names == [(name, rank) for _id, name in clusters for rank in (0, 1)]
    assert all(len(n["points"]) == 3 for n in view["nodes"])


def test_latest_shows_live_clusters_newest_samples(served: Served) -> None:
    job_id, [(old_id, _old), (cur_id, cur)] = _job_with_clusters(served)
    force_status(served.engine, Cluster, old_id, ClusterStatus.TERMINATED)
    served.latest.put(cur_id, 1, sample(NOW - 3, 80))
    served.latest.put(cur_id, 0, sample(NOW - 1, 40))
    served.latest.put(old_id, 0, sample(NOW - 1, 99))  # a terminated cluster: not shown
    view = served.client.telemetry_latest()
    assert [c["cluster"] for c in view["clusters"]] == [cur]
    (entry,) = view["clusters"]
    assert entry["job_id"] == job_id and entry["provider"] == "sim" and entry["spot"] is True
    assert entry["region"] == "us-east-1" and entry["instance_type"] == "p4d.24xlarge"
    assert entry["price_per_hour"] == 40.0
    assert entry["gpu_utilization_pct"] == 50.0  # GPUs at 40, 60, 80 and 20 %
    assert [(n["node_rank"], n["age_s"]) for n in entry["nodes"]] == [(0, 1.0), (1, 3.0)]
    assert entry["nodes"][0]["sample"]["gpus"][0]["utilization_pct"] == 40
    assert served.client.telemetry_latest(cluster=cur)["clusters"] == view["clusters"]


def test_unknown_names_are_404_and_bad_parameters_422_naming_them(served: Served) -> None:
    new_cluster(served.engine, served.clock, "c1")
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: served.client.telemetry("nope"), "no cluster named 'nope'"),
        (lambda: served.client.job_telemetry(999), "no managed job with id 999"),
        (lambda: served.client.telemetry_latest(cluster="nope"), "no cluster named 'nope'"),
        (lambda: served.client.telemetry("c1", resolution=30), "resolution: 10 or 60"),
    ]
    for call, message in cases:
        with pytest.raises(GpuleaseError, match=message):
            call()
    http = httpx.Client(base_url=served.client.url, headers={"Authorization": f"Bearer {TOKEN}"})
    for query, name in (("since=yesterday", "since"), ("since=nan", "since"),
                        ("resolution=ten", "resolution")):  # fmt: skip
        response = http.get(f"/v1/clusters/c1/telemetry?{query}")
        assert response.status_code == 422
        assert response.json()["error"]["message"].startswith(f"{name}: ")
    assert http.get("/v1/clusters/nope/telemetry").status_code == 404
    assert http.get("/v1/telemetry/latest", headers={"Authorization": ""}).status_code == 401
    http.close()
