"""The sim provider in virtual time: provisioning delay, capacity errors before any side effect,
trace-driven spot preemptions (notice, then the nodes' processes really stop), and a restarted
provider continuing the same simulation."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.clock import VirtualClock
from gpulease.providers.base import (
    TAG_CLUSTER,
    CapacityError,
    EventKind,
    InstanceState,
    LaunchRequest,
)
from gpulease.providers.local import LocalProvider
from gpulease.providers.sim import SimProvider
from gpulease.providers.sim_cloud import SimSettings
from gpulease.spot import Trace, write_trace
from tests.providers.procs import node_pids
from tests.waiting import wait_until


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    write_trace(path, Trace(600.0, (2, 2, 0, 2, 2, 2)))  # spot gone during [1200, 1800)
    return path


@pytest.fixture
def sim(tmp_path: Path, trace: Path) -> Iterator[tuple[SimProvider, VirtualClock, LocalProvider]]:
    clock = VirtualClock(start=0.0)
    nodes = LocalProvider(tmp_path / "local", kill_grace_s=0.3)
    settings = SimSettings(
        provision_seconds=(100.0, 100.0),
        spot_trace=str(trace),
        no_capacity=("us-east-1",),
        notice_seconds=120.0,
    )
    provider = SimProvider(tmp_path / "sim", settings=settings, clock=clock, nodes=nodes)
    yield provider, clock, nodes
    provider.close()


def _request(**kw: object) -> LaunchRequest:
    values: dict[str, object] = {
        "request_id": uuid.uuid4().hex,
        "cluster": "c",
        "owner": "me",
        "region": "us-west-2",
    }
    values.update(kw)
    return LaunchRequest(**values)  # type: ignore[arg-type]


def _wait_gone(provider: SimProvider, ids: list[str], nodes: LocalProvider) -> None:
    """Until the sim says TERMINATED for every node and no node process is left."""

    def gone() -> bool:
        states = {i.id: i.state for i in provider.list_instances({TAG_CLUSTER: "c"})}
        terminated = all(states.get(i) is InstanceState.TERMINATED for i in ids)
        return terminated and not node_pids(nodes, ids)

    wait_until(gone, 15, f"nodes {ids} to be gone")


def test_nodes_stay_pending_for_the_simulated_provisioning_delay(sim) -> None:  # type: ignore[no-untyped-def]
    provider, clock, _ = sim
    instances = provider.launch(_request())
    assert [i.state for i in instances] == [InstanceState.PENDING]
    assert instances[0].agent_url is None and instances[0].provider == "sim"
    clock.advance(100.0)
    (instance,) = provider.list_instances({TAG_CLUSTER: "c"})
    assert instance.state is InstanceState.RUNNING and instance.agent_url
    provider.terminate([instance.id])


def test_capacity_errors_come_before_any_process_starts(sim) -> None:  # type: ignore[no-untyped-def]
    provider, clock, _ = sim
    with pytest.raises(CapacityError) as info:
        provider.launch(_request(region="us-east-1"))
    assert info.value.region == "us-east-1"
    clock.advance(1300.0)  # inside the trace's outage
    with pytest.raises(CapacityError, match="spot"):
        provider.launch(_request(spot=True))
    assert provider.list_instances({TAG_CLUSTER: "c"}) == []


def test_spot_nodes_get_a_notice_then_are_taken_back(sim) -> None:  # type: ignore[no-untyped-def]
    provider, clock, nodes = sim
    instances = provider.launch(_request(spot=True, num_nodes=2))
    ids = [i.id for i in instances]
    clock.advance(1000.0)
    assert not [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTION_NOTICE]
    clock.advance(100.0)  # 1100 ≥ 1200 − 120: the two-minute notice
    notices = [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTION_NOTICE]
    assert sorted(e.instance_id for e in notices) == sorted(ids)
    clock.advance(100.0)  # 1200: the trace's outage starts
    taken = [e for e in provider.poll_events() if e.kind is EventKind.PREEMPTED]
    assert sorted(e.instance_id for e in taken) == sorted(ids)
    _wait_gone(provider, ids, nodes)


def test_on_demand_nodes_are_never_preempted(sim) -> None:  # type: ignore[no-untyped-def]
    provider, clock, _ = sim
    (instance,) = provider.launch(_request())
    clock.advance(5000.0)
    assert not [
        e
        for e in provider.poll_events()
        if e.kind in {EventKind.PREEMPTED, EventKind.PREEMPTION_NOTICE}
    ]
    provider.terminate([instance.id])


def test_a_restarted_provider_continues_the_simulation(tmp_path: Path, trace: Path) -> None:
    settings = SimSettings(provision_seconds=(100.0, 100.0), spot_trace=str(trace))
    clock = VirtualClock(start=0.0)
    nodes = LocalProvider(tmp_path / "local", kill_grace_s=0.3)
    first = SimProvider(tmp_path / "sim", settings=settings, clock=clock, nodes=nodes)
    request = _request(spot=True)
    (instance,) = first.launch(request)
    again = SimProvider(tmp_path / "sim", settings=settings, clock=clock, nodes=nodes)
    assert [i.id for i in again.launch(request)] == [instance.id]  # idempotent across restarts
    clock.advance(1200.0)
    assert [e.instance_id for e in again.poll_events() if e.kind is EventKind.PREEMPTED] == [
        instance.id
    ]
    _wait_gone(again, [instance.id], nodes)
