"""``GET /metrics``'s jobs and providers families (server/metrics_jobs.py), in process over a
real SQLite DB written through the state package, parsed with ``prometheus_client.parser``:
recovery seconds from the jobs' status history, deadline / expected finish / checkpoint interval
and sync age per job (a job on a provider's clock mapped to Unix time), the provider call and
error counts of real providers built by the server's ``build_providers``, and a real agent's
checkpoint sync reaching ``gpulease_checkpoint_sync_age_seconds`` through the server's poll."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr
from sqlalchemy import Engine

from gpulease.agent.client import AgentClient
from gpulease.clock import Clock, VirtualClock
from gpulease.providers.aws.errors import ExpectedError, classify
from gpulease.providers.base import CapacityError, LaunchRequest, SupportsSpot, SupportsSpotMarket
from gpulease.server.agents import HttpAgent
from gpulease.server.api import create_app
from gpulease.server.ckpt_syncs import CheckpointSyncs
from gpulease.server.metrics import ControlPlaneCollector, MetricsEndpoint, metrics_registry
from gpulease.server.metrics_jobs import JobMetricInputs, recovery_intervals
from gpulease.server.provider_calls import MAX_CODES, ProviderCalls, error_code
from gpulease.server.providers import build_providers
from gpulease.server.service import ClusterService
from gpulease.state import JobStatus, create_job, session_scope, set_status
from gpulease.storage import LocalStore
from gpulease.wire import NodeTask
from tests.agent.conftest import AgentProcess
from tests.controller.doubles import FakeAgents, FakeProvider
from tests.waiting import wait_until

with warnings.catch_warnings():  # starlette's TestClient asks for httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "t0ken-for-job-metrics"
NOW = 1_800_000_000.0
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
J = JobStatus


def _scrape(engine: Engine, inputs: JobMetricInputs) -> Samples:
    service = ClusterService(engine, {"local": FakeProvider(name="local")}, FakeAgents(),
                             clock=VirtualClock(), owner="gl-test")  # fmt: skip
    collector = ControlPlaneCollector(engine, started_at=1.0, jobs=inputs)
    app = create_app(
        service, SecretStr(TOKEN), metrics=MetricsEndpoint(metrics_registry(collector))
    )
    response = TestClient(app).get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    found: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _series(samples: Samples, name: str) -> dict[str, float]:
    return {dict(k[1]).get("job_id", ""): v for k, v in samples.items() if k[0] == name}


def _job(
    engine: Engine, task: dict[str, object], walk: list[tuple[J, float]], **row: object
) -> int:
    with session_scope(engine) as s:
        job = create_job(
            s,
            name="j",
            task=task,
            owner="o",
            actor="t",
            now=walk[0][1] - 1,
            clock=str(row.pop("clock", "system")),
            started_at_job=row.pop("started_at_job", None),
        )  # type: ignore[arg-type]
        s.flush()
        for status, at in walk:
            assert set_status(s, job, status, actor="test", reason="test", now=at)
        for key, value in row.items():
            setattr(job, key, value)
        return job.id


def test_recovery_seconds_run_from_the_loss_to_running_again(engine: Engine) -> None:
    _job(engine, {}, [(J.STARTING, 5.0), (J.RUNNING, 10.0),
                      (J.RECOVERING, 100.0), (J.STARTING, 110.0),  # the new attempt fails...
                      (J.RECOVERING, 120.0), (J.STARTING, 130.0), (J.RUNNING, 160.0),  # 60 s
                      (J.RECOVERING, 200.0), (J.STARTING, 201.0), (J.RUNNING, 205.0)])  # fmt: skip
    _job(engine, {}, [(J.STARTING, 5.0), (J.RUNNING, 7.0), (J.RECOVERING, 50.0)])  # not yet
    samples = _scrape(engine, JobMetricInputs(VirtualClock(NOW)))
    name = "gpulease_recovery_seconds"
    assert _value(samples, f"{name}_count") == 2
    assert _value(samples, f"{name}_sum") == 65.0
    assert _value(samples, f"{name}_bucket", le="1.0") == 0
    assert _value(samples, f"{name}_bucket", le="5.0") == 1  # le: ≤ the bound
    assert _value(samples, f"{name}_bucket", le="30.0") == 1
    assert _value(samples, f"{name}_bucket", le="60.0") == 2
    assert _value(samples, f"{name}_bucket", le="+Inf") == 2


def test_recovery_intervals_keep_jobs_apart() -> None:
    rows = [(1, "recovering", 10.0), (2, "recovering", 11.0), (2, "running", 15.0),
            (1, "running", 40.0), (1, "running", 50.0)]  # fmt: skip
    assert sorted(recovery_intervals(iter(rows))) == [4.0, 30.0]


def test_an_empty_db_has_an_empty_recovery_histogram_and_no_job_series(engine: Engine) -> None:
    samples = _scrape(engine, JobMetricInputs(VirtualClock(NOW)))
    assert _value(samples, "gpulease_recovery_seconds_count") == 0
    for name in ("deadline_timestamp_seconds", "expected_finish_timestamp_seconds",
                 "checkpoint_interval_seconds"):  # fmt: skip
        assert not _series(samples, f"gpulease_job_{name}")
    assert not _series(samples, "gpulease_checkpoint_sync_age_seconds")
    assert not _series(samples, "gpulease_provider_api_calls_total")


def _doc(task_id: str, *, policy: dict[str, float], store: str | None = "local:///ck",
         sync_s: float | None = None) -> dict[str, object]:  # fmt: skip
    return {"task_id": task_id, "policy": policy,
            "checkpoint": {"store": store, "sync_s": sync_s} if store else None}  # fmt: skip


class _Clocks:
    """The jobs' clocks (``JobReconciler.job_clock``): ``sim`` is a simulated cloud's clock,
    with an epoch of its own; every other name is the server's."""

    def __init__(self, server: Clock) -> None:
        self.server, self.sim = server, VirtualClock(5_000.0)

    def __call__(self, name: str) -> Clock:
        return self.sim if name == "sim" else self.server


def test_deadlines_expected_finishes_and_checkpoints_per_job(engine: Engine) -> None:
    policy = {"deadline_s": 7200.0, "job_s": 3600.0, "changeover_s": 600.0}
    running = _job(engine, _doc("t-run", policy=policy, sync_s=60.0),
                   [(J.STARTING, NOW - 2000), (J.RUNNING, NOW - 1500)],
                   started_at_job=NOW - 2000, run_s=1000.0, mark_at_job=NOW - 100)  # fmt: skip
    waiting = _job(engine, _doc("t-wait", policy=policy),
                   [(J.STARTING, NOW - 900), (J.RUNNING, NOW - 800), (J.RECOVERING, NOW - 50)],
                   started_at_job=NOW - 900, run_s=750.0, mark_at_job=NOW - 50)  # fmt: skip
    sim = _job(engine, _doc("t-sim", policy={"deadline_s": 3600.0}, store=None),
               [(J.STARTING, NOW - 10)], clock="sim", started_at_job=4_000.0)  # fmt: skip
    plain = _job(engine, _doc("t-plain", policy={}, store=None), [(J.STARTING, NOW - 5)])
    done = _job(engine, _doc("t-done", policy=policy),
                [(J.STARTING, NOW - 9), (J.RUNNING, NOW - 8), (J.SUCCEEDED, NOW - 7)])  # fmt: skip
    syncs = CheckpointSyncs()
    syncs.record("t-run", NOW - 30)
    syncs.record("t-run", NOW - 90)  # an older report changes nothing
    syncs.record("t-done", NOW - 1)
    server = VirtualClock(NOW)
    samples = _scrape(engine, JobMetricInputs(server, _Clocks(server), syncs))

    deadlines = _series(samples, "gpulease_job_deadline_timestamp_seconds")
    assert deadlines == {str(running): NOW - 2000 + 7200, str(waiting): NOW - 900 + 7200,
                         # the sim clock's 4,000 + 3,600 is 2,600 s ahead of its now (5,000)
                         str(sim): NOW + 2600}  # fmt: skip
    finishes = _series(samples, "gpulease_job_expected_finish_timestamp_seconds")
    # running: 1,000 s accrued + 100 s since the mark; waiting: a changeover first
    assert finishes == {str(running): NOW + 3600 - 1100, str(waiting): NOW + 600 + 3600 - 750}
    intervals = _series(samples, "gpulease_job_checkpoint_interval_seconds")
    assert intervals == {str(running): 60.0, str(waiting): 300.0}  # the agent's default
    ages = _series(samples, "gpulease_checkpoint_sync_age_seconds")
    assert ages == {str(running): 30.0}  # waiting never synced and does not run: unknown
    assert str(plain) not in deadlines and str(done) not in finishes


def test_a_running_job_that_never_synced_ages_from_its_start(engine: Engine) -> None:
    job = _job(engine, _doc("t-new", policy={}), [(J.STARTING, NOW - 400), (J.RUNNING, NOW - 300)])
    samples = _scrape(engine, JobMetricInputs(VirtualClock(NOW), syncs=CheckpointSyncs()))
    assert _series(samples, "gpulease_checkpoint_sync_age_seconds") == {str(job): 300.0}


def test_provider_calls_and_errors_of_the_servers_providers(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPULEASE_HOME", str(tmp_path))
    calls = ProviderCalls()
    config = {"providers": {"sim": {"no_capacity": ["us-east-1"]}}}
    providers = build_providers(config, calls=calls)
    build_providers(config, calls=calls)  # other objects: counted on their own
    sim = providers["sim"]
    assert isinstance(sim, SupportsSpot) and isinstance(sim, SupportsSpotMarket)  # unchanged
    request = LaunchRequest(request_id="r1", cluster="c", owner="o", region="us-east-1",
                            zone="us-east-1a", instance_type="g4dn.xlarge", accelerator="T4",
                            gpus_per_node=1)  # fmt: skip
    for _ in range(2):
        with pytest.raises(CapacityError, match="no capacity"):  # raised through unchanged
            sim.launch(request)
    assert sim.list_instances({}) == [] and sim.poll_events() == []
    assert sim.spot_available("us-east-1", None, 1) is True
    assert providers["local"].list_instances({}) == []

    samples = _scrape(engine, JobMetricInputs(VirtualClock(NOW), provider_calls=calls))
    made = "gpulease_provider_api_calls_total"
    assert _value(samples, made, provider="sim", operation="launch") == 2
    assert _value(samples, made, provider="sim", operation="list_instances") == 1
    assert _value(samples, made, provider="sim", operation="spot_available") == 1
    assert _value(samples, made, provider="local", operation="list_instances") == 1
    errors = {k: v for k, v in samples.items() if k[0] == "gpulease_provider_api_errors_total"}
    labels = {"provider": "sim", "operation": "launch", "code": "CapacityError"}
    assert errors == {("gpulease_provider_api_errors_total", frozenset(labels.items())): 2.0}


def test_error_codes_are_the_clouds_code_or_the_class_and_bounded() -> None:
    from botocore.exceptions import ClientError

    denied = ClientError({"Error": {"Code": "UnauthorizedOperation"}}, "RunInstances")
    full = ClientError({"Error": {"Code": "InsufficientInstanceCapacity"}}, "RunInstances")
    assert error_code(classify(denied, action="RunInstances")) == "UnauthorizedOperation"
    assert error_code(classify(full, action="RunInstances")) == "InsufficientInstanceCapacity"
    assert error_code(ExpectedError("InvalidPlacementGroup.InUse")) == "InvalidPlacementGroup.InUse"
    assert error_code(ExpectedError("no spaces allowed")) == "ExpectedError"
    assert error_code(ValueError("x")) == "ValueError"
    calls = ProviderCalls()
    for n in range(MAX_CODES + 5):
        calls.failed("aws", "launch", ExpectedError(f"Code{n}"))
    codes = {c for _p, _o, c in calls.errors()}
    assert len(codes) == MAX_CODES + 1 and "other" in codes
    assert calls.errors()[("aws", "launch", "other")] == 5


def test_a_real_agents_checkpoint_sync_reaches_the_age_series(
    engine: Engine, tmp_path: Path
) -> None:
    root = tmp_path / "agent"
    root.mkdir()
    agent = AgentProcess(root).start()
    try:
        store = tmp_path / "store"
        run = ("python -c 'import os; from pathlib import Path; from gpulease.storage import "
               'LocalStore; LocalStore(Path(os.environ["GPULEASE_CHECKPOINT_DIR"])).write('
               "3, {\"m.pt\": b\"x\"})'; sleep 30")  # fmt: skip
        agent.api.submit(NodeTask(task_id="t-ck", run=run, checkpoint_store=f"local://{store}",
                                  checkpoint_sync_s=0.2))  # fmt: skip
        syncs = CheckpointSyncs()
        http = HttpAgent(AgentClient(agent.url, agent.token), syncs=syncs)
        synced = wait_until(lambda: http.poll("t-ck") and syncs.last("t-ck"), 20, "a sync")
        assert 3 in LocalStore(store).list_complete()
        assert 0 < synced <= agent.api.status("t-ck")["checkpoint"]["last_sync_at"]
        job = _job(engine, _doc("t-ck", policy={}), [(J.STARTING, NOW - 9), (J.RUNNING, NOW - 8)])
        samples = _scrape(engine, JobMetricInputs(VirtualClock(synced + 12.5), syncs=syncs))
        assert _series(samples, "gpulease_checkpoint_sync_age_seconds") == {str(job): 12.5}
        http.client.close()
    finally:
        agent.api.cancel("t-ck")
        agent.kill_session()
