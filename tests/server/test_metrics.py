"""``GET /metrics`` in process (FastAPI's test client) over a real SQLite DB written through the
state package: the text parses with ``prometheus_client.parser``, every value matches the rows
(clusters, nodes and jobs by status; $/h of the nodes billed; launches, failovers, preemptions,
recoveries), the pass-duration histogram, the token, and the config key."""

from __future__ import annotations

import warnings

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.errors import UserInputError
from gpulease.server.api import create_app
from gpulease.server.metrics import (
    ControlPlaneCollector,
    MetricsEndpoint,
    is_loopback,
    metrics_registry,
    open_to_loopback,
)
from gpulease.server.runtime import PassTimes
from gpulease.server.service import ClusterService
from gpulease.state import (
    ClusterStatus,
    JobStatus,
    LaunchTarget,
    NodeState,
    create_cluster,
    create_job,
    ensure_node,
    fail_over,
    session_scope,
    set_status,
)
from tests.controller.doubles import FakeAgents, FakeProvider

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-metrics"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _client(
    engine: Engine, times: PassTimes | None = None, *, loopback: bool = False
) -> TestClient:
    service = ClusterService(engine, {"local": FakeProvider(name="local")}, FakeAgents(),
                             clock=VirtualClock(), owner="gl-test")  # fmt: skip
    collector = ControlPlaneCollector(engine, pass_times=times, started_at=1000.0)
    endpoint = MetricsEndpoint(metrics_registry(collector), open_to_loopback=loopback)
    return TestClient(create_app(service, SecretStr(TOKEN), metrics=endpoint))


def _scrape(client: TestClient) -> Samples:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    found: Samples = {}
    for family in text_string_to_metric_families(response.text):
        assert family.name.startswith("gpulease_"), family.name
        for sample in family.samples:
            assert "job" not in sample.labels, sample  # Prometheus renames it on scrape
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _walk(session: object, entity: object, *statuses: object, now: float = 10.0) -> None:
    for status in statuses:
        assert set_status(session, entity, status, actor="test", reason="test", now=now)  # type: ignore[arg-type]


def _write_fleet(engine: Engine) -> int:
    """A running spot cluster of 2 nodes at $3/h (one node preempted, after one failover), a
    pending cluster, a terminated one, and two jobs; the running job's id."""
    target = LaunchTarget(provider="sim", region="us-east-1", zone="us-east-1a",
                          instance_type="g4dn.xlarge", accelerator="T4", gpus_per_node=1,
                          num_nodes=2, pricing="spot", price_per_hour=3.0)  # fmt: skip
    with session_scope(engine) as s:
        run, _ = create_cluster(s, name="run", target=target, task={}, owner="o", actor="t", now=1)
        fail_over(s, run, target=target, error="no capacity", actor="t", now=2)
        _walk(s, run, ClusterStatus.SETTING_UP, ClusterStatus.RUNNING)
        up = ensure_node(s, run, instance_id="i-0", node_rank=0, actor="t", now=3)
        gone = ensure_node(s, run, instance_id="i-1", node_rank=1, actor="t", now=3)
        s.flush()
        _walk(s, up, NodeState.READY)
        _walk(s, gone, NodeState.PREEMPTED)
        pend, _ = create_cluster(s, name="pend", target=target, task={}, owner="o", actor="t",
                                 now=4)  # fmt: skip
        old, _ = create_cluster(s, name="old", target=target, task={}, owner="o", actor="t", now=5)
        _walk(s, old, ClusterStatus.TERMINATING, ClusterStatus.TERMINATED)
        job = create_job(s, name="train", task={}, owner="o", actor="t", now=6)
        done = create_job(s, name="done", task={}, owner="o", actor="t", now=6)
        s.flush()
        job.cluster_id, job.recoveries, job.restarts = run.id, 2, 1
        done.recoveries = 1
        _walk(s, job, JobStatus.STARTING, JobStatus.RUNNING)
        _walk(s, done, JobStatus.STARTING, JobStatus.SUCCEEDED)
        assert pend.id
        return job.id


def test_metrics_match_the_state_db(engine: Engine) -> None:
    job_id = _write_fleet(engine)
    samples = _scrape(_client(engine))

    assert _value(samples, "gpulease_clusters", status="running") == 1
    assert _value(samples, "gpulease_clusters", status="pending") == 1
    assert _value(samples, "gpulease_clusters", status="terminated") == 1
    assert _value(samples, "gpulease_clusters", status="stopped") == 0  # every status, 0 too
    assert _value(samples, "gpulease_nodes", status="ready") == 1
    assert _value(samples, "gpulease_nodes", status="preempted") == 1
    assert _value(samples, "gpulease_jobs", status="running") == 1
    assert _value(samples, "gpulease_jobs", status="succeeded") == 1

    where = {"provider": "sim", "region": "us-east-1", "instance_type": "g4dn.xlarge",
             "spot": "true"}  # fmt: skip
    price = "gpulease_cluster_price_usd_per_hour"
    assert _value(samples, price, cluster="run", **where) == 1.5  # one of its 2 nodes billed
    assert _value(samples, price, cluster="pend", **where) == 0.0  # no node yet
    assert not [k for k in samples if k[0] == price and ("cluster", "old") in k[1]]
    job_price = _value(samples, "gpulease_job_price_usd_per_hour", job_id=str(job_id),
                       cluster="run", **where)  # fmt: skip
    assert job_price == 1.5
    assert len([k for k in samples if k[0] == "gpulease_job_price_usd_per_hour"]) == 1

    assert _value(samples, "gpulease_launches_total") == 4  # 3 clusters + 1 failover
    assert _value(samples, "gpulease_failovers_total") == 1
    assert _value(samples, "gpulease_preemptions_total") == 1
    assert _value(samples, "gpulease_job_recoveries_total") == 3
    assert _value(samples, "gpulease_job_restarts_total") == 1
    assert _value(samples, "gpulease_server_start_time_seconds") == 1000.0
    assert [k for k in samples if k[0] == "gpulease_build_info"]


def test_an_empty_db_scrapes_zeros(engine: Engine) -> None:
    samples = _scrape(_client(engine))
    assert _value(samples, "gpulease_clusters", status="running") == 0
    assert _value(samples, "gpulease_launches_total") == 0
    assert not [k for k in samples if k[0] == "gpulease_cluster_price_usd_per_hour"]


def test_pass_durations_are_a_cumulative_histogram(engine: Engine) -> None:
    times = PassTimes()
    for seconds in (0.001, 0.01, 0.3, 45.0):
        times.observe("clusters", seconds)
    times.observe("jobs", 0.002)
    samples = _scrape(_client(engine, times))
    name = "gpulease_reconcile_pass_seconds"
    assert _value(samples, f"{name}_bucket", loop="clusters", le="0.005") == 1
    assert _value(samples, f"{name}_bucket", loop="clusters", le="0.01") == 2  # le: ≤ the bound
    assert _value(samples, f"{name}_bucket", loop="clusters", le="0.5") == 3
    assert _value(samples, f"{name}_bucket", loop="clusters", le="30.0") == 3
    assert _value(samples, f"{name}_bucket", loop="clusters", le="+Inf") == 4
    assert _value(samples, f"{name}_count", loop="clusters") == 4
    assert _value(samples, f"{name}_sum", loop="clusters") == pytest.approx(45.311)
    assert _value(samples, f"{name}_count", loop="jobs") == 1


def test_metrics_need_the_token(engine: Engine) -> None:
    client = _client(engine)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401
        assert "gpulease_" not in response.text
    # open to loopback: the test client's peer ("testclient") is no loopback address
    assert _client(engine, loopback=True).get("/metrics").status_code == 401


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.3.2.1") and is_loopback("::1")
    assert not is_loopback("10.0.0.1") and not is_loopback("testclient")
    assert not is_loopback(None) and not is_loopback("")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"server": []}, "server: must be a mapping"),
        ({"server": {"metrics": 1}}, "server.metrics: must be a mapping"),
        ({"server": {"metrics": {"open_to_loopback": "yes"}}}, "true or false, not 'yes'"),
        ({"server": {"metrics": {"open": True}}}, "server.metrics.open: unknown key"),
    ],
)
def test_bad_metrics_config_names_the_key(config: dict[str, object], words: str) -> None:
    with pytest.raises(UserInputError, match=words):
        open_to_loopback(config)


def test_metrics_config_defaults_to_closed() -> None:
    assert open_to_loopback({}) is False
    assert open_to_loopback({"server": {"metrics": {"open_to_loopback": True}}}) is True
