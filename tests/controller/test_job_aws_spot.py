"""A managed spot job on the aws provider, interrupted: moto runs in process
(``ThreadedMotoServer``, it has no interruption API), the test terminates the spot instance through
moto's backend with the reason EC2 gives an interruption, the provider reports it as a
PREEMPTED event, and the jobs loop recovers the job with a relaunch in another zone (the
preempted one cooling down). The AWS side is real moto; the node side is the agent double of
tests/controller/doubles.py (moto runs no VM, so no agent): the test's provider subclass gives
each running instance a fake agent URL that the double answers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import LoopSettings, Reconciler
from gpulease.controller.job_loop import JobReconciler
from gpulease.providers.aws import AwsProvider, AwsSettings
from gpulease.providers.base import Instance, InstanceState
from gpulease.state import JobStatus, LaunchTarget, NodeState, session_scope
from gpulease.state.models import Cluster
from tests.awsfixtures import fresh_default_session
from tests.controller.doubles import FakeAgents
from tests.controller.test_job_rules import OWNER, job_row, make_doc, new_job
from tests.providers.test_aws_spot import _interrupt, threaded_moto  # noqa: F401 - fixture

pytestmark = pytest.mark.parametrize("db_kind", ["sqlite"], indirect=True)

ZONES = ("use1-az1", "use1-az2")


class AgentUrlAws(AwsProvider):
    """The aws provider, with a fake agent URL on every running instance (no VM, no agent), its
    events polled on every pass (the test runs passes back to back)."""

    events_every_s = 0.0

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return [
            dataclasses.replace(i, agent_url=f"http://agent/{i.id}")
            if i.state is InstanceState.RUNNING
            else i
            for i in super().list_instances(tags)
        ]


@pytest.fixture
def aws(
    threaded_moto: str,  # noqa: F811 - fixture
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[AgentUrlAws]:
    for name, value in (
        ("AWS_ENDPOINT_URL", threaded_moto), ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_CONFIG_FILE", str(tmp_path / "none")),
        ("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none")),
    ):  # fmt: skip
        monkeypatch.setenv(name, value)
    fresh_default_session(monkeypatch)
    provider = AgentUrlAws(tmp_path / "aws", AwsSettings(tunnels=False), retry_base=0.01)
    yield provider
    provider.close()


def _spot(zone: str, price: float) -> LaunchTarget:
    return LaunchTarget(
        provider="aws", region="us-east-1", zone=zone, instance_type="g4dn.xlarge",
        accelerator="T4", gpus_per_node=1, pricing="spot", price_per_hour=price,
    )  # fmt: skip


def _passes(loops: tuple[Reconciler, JobReconciler], until: Any, what: str) -> None:
    for _ in range(60):
        for loop in loops:
            loop.run_pass()
        if until():
            return
    raise AssertionError(f"never reached: {what}")


def _attempt(engine: Engine, job_id: int) -> tuple[Cluster, list[Any]]:
    with session_scope(engine) as session:
        row = job_row(engine, job_id)
        cluster = session.get(Cluster, row.cluster_id)
        assert cluster is not None
        nodes = [(n.instance_id, n.state) for n in cluster.nodes]
        session.expunge(cluster)
        return cluster, nodes


def test_an_interrupted_spot_job_relaunches_in_another_zone(
    engine: Engine, aws: AgentUrlAws, clock: VirtualClock
) -> None:
    agents = FakeAgents()
    providers = {"aws": aws}
    loops = (
        Reconciler(engine, providers, agents, clock=clock, owner=OWNER,
                   settings=LoopSettings(resting_every_s=0.0)),
        JobReconciler(engine, providers, agents, clock=clock, owner=OWNER),
    )  # fmt: skip
    doc = make_doc(spot=(_spot(ZONES[0], 0.2), _spot(ZONES[1], 0.3)), on_demand=(),
                   use_spot="true", strategy="next_region")  # fmt: skip
    jid = new_job(engine, clock, doc)
    _passes(loops, lambda: job_row(engine, jid).status is JobStatus.RUNNING, "the job running")
    first, nodes = _attempt(engine, jid)
    assert first.zone == ZONES[0]
    ((instance_id, _state),) = nodes

    _interrupt(instance_id)
    _passes(loops, lambda: job_row(engine, jid).recoveries == 1, "the job recovering")
    row = job_row(engine, jid)
    assert row.status in (JobStatus.RECOVERING, JobStatus.STARTING, JobStatus.RUNNING)
    assert any(e["kind"] == "preemption" for e in row.events)
    assert row.blocked and row.blocked[0]["zone"] == ZONES[0]

    _passes(loops, lambda: job_row(engine, jid).status is JobStatus.RUNNING, "running again")
    second, nodes = _attempt(engine, jid)
    assert second.id != first.id and second.zone == ZONES[1]
    ((new_id, state),) = nodes
    assert state is NodeState.READY and new_id != instance_id
    placed = aws.ec2.client("us-east-1").describe_instances(InstanceIds=[new_id])
    zone_name = placed["Reservations"][0]["Instances"][0]["Placement"]["AvailabilityZone"]
    zones = aws.ec2.client("us-east-1").describe_availability_zones()["AvailabilityZones"]
    assert {z["ZoneName"]: z["ZoneId"] for z in zones}[zone_name] == ZONES[1]
