"""The cluster reconciler against a provider double and agent doubles, in virtual time: launch to
success, failover, retries with backoff, timeouts, heartbeats, terminate confirmation, stop/start,
autostop and crash-repeat idempotency. Every pass is a real ``run_pass`` on a real SQLite DB."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller import Reconciler
from gpulease.state import (
    ClusterStatus,
    IntentStatus,
    NodeState,
    history,
    session_scope,
    set_status,
    submit_intent,
)
from gpulease.state.models import Cluster
from gpulease.wire import RunSpec
from tests.controller.conftest import cluster_row, new_cluster, target
from tests.controller.doubles import FakeAgents, FakeProvider

C = ClusterStatus


def run(reconciler: Reconciler, clock: VirtualClock, passes: int = 1, step: float = 1.0) -> None:
    for _ in range(passes):
        reconciler.run_pass()
        clock.advance(step)


def run_until(
    reconciler: Reconciler,
    clock: VirtualClock,
    engine: Engine,
    cid: int,
    status: ClusterStatus,
    *,
    passes: int = 30,
) -> Cluster:
    for _ in range(passes):
        row = cluster_row(engine, cid)
        if row.status is status:
            return row
        run(reconciler, clock)
    raise AssertionError(f"cluster stayed {cluster_row(engine, cid).status}, wanted {status}")


def user_sets(engine: Engine, cid: int, status: ClusterStatus, clock: VirtualClock) -> None:
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        assert set_status(session, row, status, actor="user", reason="cli", now=clock.now())


def test_a_launch_goes_pending_to_succeeded_in_single_steps(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock, plans=(target(nodes=2),))
    seen = []
    for _ in range(6):
        run(reconciler, clock)
        seen.append(cluster_row(engine, cid).status)
    assert seen[:4] == [C.PROVISIONING, C.SETTING_UP, C.SETTING_UP, C.RUNNING]
    assert len(provider.launch_calls) == 1 and len(provider.live()) == 2
    tasks = [agents[i].task for i in provider.live()]
    assert sorted(t.node_rank for t in tasks if t) == [0, 1]
    assert all(t and t.node_ips == ("10.0.0.1", "10.0.0.2") and t.num_nodes == 2 for t in tasks)
    assert all(t and t.workdir == "/src" and t.run == "python train.py" for t in tasks)
    agents.finish_all()
    row = run_until(reconciler, clock, engine, cid, C.SUCCEEDED)
    assert [n.exit_code for n in row.nodes] == [0, 0]
    assert all(n.state is NodeState.READY for n in row.nodes)
    assert all(n.agent_token_hash for n in row.nodes)
    assert [i.status for i in row.intents] == [IntentStatus.DONE]


def test_a_failed_node_task_fails_the_cluster_and_cancels_the_others(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock, plans=(target(nodes=2),))
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    first, second = provider.live()
    agents[second].state, agents[second].exit_code = "FAILED", 3
    agents[second].step, agents[second].detail = "setup", "setup exited 3"
    row = run_until(reconciler, clock, engine, cid, C.FAILED)
    assert agents[first].cancels == 1
    assert sorted(n.exit_code for n in row.nodes if n.exit_code is not None) == [3]
    assert "exit code 3): setup exited 3" in last_reason(engine, cid)
    rank = next(n.node_rank for n in row.nodes if n.instance_id == second)
    assert row.failure == "task" and row.task_failure == {
        "rank": rank, "state": "FAILED", "step": "setup", "exit_code": 3, "signal": None,
        "detail": "setup exited 3",
    }  # fmt: skip


def last_reason(engine: Engine, cid: int) -> str:
    with session_scope(engine) as session:
        row = session.get(Cluster, cid)
        assert row is not None
        return history(session, row)[-1].reason


def test_capacity_errors_fail_over_through_the_plans_then_fail(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    provider.no_capacity = {"r1", "r2"}
    cid = new_cluster(engine, clock, plans=(target("r1"), target("r2"), target("r3")))
    row = run_until(reconciler, clock, engine, cid, C.SETTING_UP)
    assert row.region == "r3"
    assert [f["region"] for f in row.failover_history] == ["r1", "r2"]
    assert all("CapacityError" in f["error"] for f in row.failover_history)
    assert [i.status for i in row.intents] == [IntentStatus.FAILED] * 2 + [IntentStatus.DONE]

    provider.no_capacity = {"r1", "r2", "r3"}
    other = new_cluster(engine, clock, name="c2", plans=(target("r1"), target("r2")))
    row = run_until(reconciler, clock, engine, other, C.FAILED)
    assert len(row.failover_history) == 1 and not provider.by_request.keys() - {
        i.request_id for i in cluster_row(engine, cid).intents
    }
    assert all(i.status is IntentStatus.FAILED for i in row.intents)


def test_an_unavailable_provider_is_retried_with_backoff_not_failed_over(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    provider.unavailable = 3
    cid = new_cluster(engine, clock, plans=(target("r1"), target("r2")))
    row = run_until(reconciler, clock, engine, cid, C.SETTING_UP, passes=60)
    assert row.region == "r1" and row.failover_history == []
    assert row.intents[0].attempt == 4  # three refused calls, then the accepted one


def test_the_provider_and_the_nodes_learn_the_task_image(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    run_spec = RunSpec(run="x", image="ghcr.io/org/img:v1", image_registry="ghcr.io")
    new_cluster(engine, clock, plans=(target(),), run=run_spec)
    run(reconciler, clock, passes=3)
    assert [r.image for r in provider.requests] == ["ghcr.io/org/img:v1"]  # aws: engine step
    (task,) = [agents[i].task for i in provider.live()]
    assert task is not None and task.image == "ghcr.io/org/img:v1"
    assert task.image_registry == "ghcr.io"


def test_a_crash_after_launch_re_sends_the_same_request_and_adds_no_node(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = new_cluster(engine, clock, plans=(target(nodes=2),))
    request_id = cluster_row(engine, cid).intents[0].request_id
    # a previous server called the provider, then died before recording the nodes
    submit_intent(engine, request_id, lambda v: None, clock=clock, actor="dead-server")
    provider.launch(_request_like(provider, request_id, cid, engine))
    row = run_until(reconciler, clock, engine, cid, C.RUNNING)
    assert provider.launch_calls == [request_id, request_id]
    assert len(row.nodes) == 2 and len(provider.live()) == 2


def _request_like(provider: FakeProvider, request_id: str, cid: int, engine: Engine):  # type: ignore[no-untyped-def]
    from gpulease.providers.base import LaunchRequest

    row = cluster_row(engine, cid)
    return LaunchRequest(request_id=request_id, cluster=row.name, owner=row.owner, num_nodes=2,
                         region=row.region)  # fmt: skip


def test_provisioning_times_out_terminates_its_nodes_and_fails_over(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock, plans=(target("r1"), target("r2")))
    run(reconciler, clock)
    stuck = provider.live()
    agents[stuck[0]].alive = False  # its agent never answers
    run(reconciler, clock, passes=3)
    assert cluster_row(engine, cid).status is C.PROVISIONING
    clock.advance(20 * 60)
    row = run_until(reconciler, clock, engine, cid, C.SETTING_UP)
    assert row.region == "r2" and "timed out" in row.failover_history[0]["error"]
    assert stuck[0] not in provider.live()
    old = next(n for n in row.nodes if n.instance_id == stuck[0])
    assert old.state is NodeState.TERMINATED


def test_a_node_is_lost_only_after_n_missed_polls_and_comes_back(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    (iid,) = provider.live()
    agents[iid].alive = False
    for _ in range(reconciler.config.lost_after_missed - 1):
        run(reconciler, clock)
        assert cluster_row(engine, cid).nodes[0].state is NodeState.READY  # UNKNOWN is alive
    run(reconciler, clock)
    node = cluster_row(engine, cid).nodes[0]
    assert node.state is NodeState.LOST and cluster_row(engine, cid).status is C.RUNNING
    agents[iid].alive = True
    run(reconciler, clock)
    node = cluster_row(engine, cid).nodes[0]
    assert node.state is NodeState.READY and node.missed_heartbeats == 0


def test_an_instance_the_provider_confirms_gone_fails_the_cluster(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    (iid,) = provider.live()
    agents[iid].alive = False
    provider.vanish(iid)
    run_until(reconciler, clock, engine, cid, C.FAILED)
    assert "gone" in last_reason(engine, cid)
    run(reconciler, clock, passes=2)
    assert cluster_row(engine, cid).nodes[0].state is NodeState.TERMINATED


def test_terminate_waits_for_the_provider_to_confirm(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = new_cluster(engine, clock, plans=(target(nodes=2),))
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    user_sets(engine, cid, C.TERMINATING, clock)
    provider.unavailable = 2  # the first listings fail: nothing may be concluded
    run(reconciler, clock, passes=2)
    assert cluster_row(engine, cid).status is C.TERMINATING
    run(reconciler, clock)  # terminate sent; instances TERMINATING, not yet confirmed
    assert cluster_row(engine, cid).status is C.TERMINATING and provider.terminate_calls
    row = run_until(reconciler, clock, engine, cid, C.TERMINATED)
    assert provider.live() == []
    assert all(n.state is NodeState.TERMINATED for n in row.nodes)


def test_terminate_while_pending_closes_the_intent_and_ends_terminated(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    cid = new_cluster(engine, clock)
    user_sets(engine, cid, C.TERMINATING, clock)
    row = run_until(reconciler, clock, engine, cid, C.TERMINATED)
    assert provider.launch_calls == [] and row.intents[0].status is IntentStatus.FAILED


def test_autostop_stops_an_idle_cluster_and_start_brings_it_back(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock, autostop=5)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    agents.finish_all()
    run_until(reconciler, clock, engine, cid, C.SUCCEEDED)
    run(reconciler, clock, passes=3)
    assert cluster_row(engine, cid).status is C.SUCCEEDED  # not idle long enough yet
    clock.advance(5 * 60)
    row = run_until(reconciler, clock, engine, cid, C.STOPPED)
    assert row.nodes[0].state is NodeState.STOPPED
    user_sets(engine, cid, C.STARTING, clock)
    row = run_until(reconciler, clock, engine, cid, C.SUCCEEDED)
    (iid,) = provider.live()
    assert row.nodes[0].agent_url == f"http://agent/{iid}/restarted"
    assert agents[iid].submits == 1  # the agent kept its finished task: nothing re-run


def test_autostop_with_down_terminates(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, agents: FakeAgents,
    clock: VirtualClock,
) -> None:  # fmt: skip
    cid = new_cluster(engine, clock, autostop=1, down=True)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    agents.finish_all()
    run_until(reconciler, clock, engine, cid, C.SUCCEEDED)
    clock.advance(61)
    run_until(reconciler, clock, engine, cid, C.TERMINATED)
    assert provider.live() == []


def test_a_cluster_claimed_elsewhere_is_not_stepped(
    engine: Engine, reconciler: Reconciler, provider: FakeProvider, clock: VirtualClock
) -> None:
    from gpulease.state import claim

    cid = new_cluster(engine, clock)
    with session_scope(engine) as session:
        assert claim(session, cid, "other-worker", until=clock.now() + 30, now=clock.now())
    run(reconciler, clock, passes=3)
    assert provider.launch_calls == [] and cluster_row(engine, cid).status is C.PENDING
    clock.advance(60)  # the other worker's claim expires
    run(reconciler, clock)
    assert provider.launch_calls and cluster_row(engine, cid).status is C.PROVISIONING


@pytest.mark.parametrize("change", [(C.TERMINATING, C.TERMINATED), (C.STOPPING, C.STOPPED)])
def test_a_user_change_during_a_step_wins(
    engine: Engine, reconciler: Reconciler, agents: FakeAgents, clock: VirtualClock,
    change: tuple[ClusterStatus, ClusterStatus],
) -> None:  # fmt: skip
    user, then = change
    cid = new_cluster(engine, clock)
    run_until(reconciler, clock, engine, cid, C.RUNNING)
    agents.finish_all("FAILED", 1)  # the step decides RUNNING → FAILED (also allowed from STOPPING)
    original = reconciler.observer.snapshot

    def racing(*args, **kw):  # type: ignore[no-untyped-def]
        snap = original(*args, **kw)
        user_sets(engine, cid, user, clock)  # lands between observe and apply
        return snap

    reconciler.observer.snapshot = racing  # type: ignore[method-assign]
    run(reconciler, clock)
    reconciler.observer.snapshot = original  # type: ignore[method-assign]
    assert cluster_row(engine, cid).status is user
    run_until(reconciler, clock, engine, cid, then)


def test_stale_claims_of_a_dead_server_on_this_host_are_released(
    engine: Engine, reconciler: Reconciler, clock: VirtualClock
) -> None:
    from gpulease.controller.reconciler import worker_prefix
    from gpulease.state import claim

    cid = new_cluster(engine, clock)
    dead = f"{worker_prefix(reconciler.owner)}999999"
    with session_scope(engine) as session:
        assert claim(session, cid, dead, until=clock.now() + 600, now=clock.now())
    assert reconciler.release_stale_claims() == 1
    run(reconciler, clock)
    assert cluster_row(engine, cid).status is C.PROVISIONING
