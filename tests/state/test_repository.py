"""Clusters, intents, failover and the server identity: what the server writes and reads."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, func, select

from gpulease.clock import VirtualClock
from gpulease.state import (
    ClusterExists,
    ClusterStatus,
    IntentStatus,
    InvalidTransition,
    LaunchTarget,
    append_failover,
    create_cluster,
    ensure_node,
    fail_over,
    get_cluster,
    get_cluster_by_name,
    get_intent,
    history,
    list_clusters,
    make_engine,
    open_intents,
    record_activity,
    server_owner_id,
    session_scope,
)
from gpulease.state.models import Cluster, LaunchIntent, Node
from tests.state.helpers import TARGET, force_status, new_cluster


def test_create_writes_a_pending_cluster_and_intent_with_history(
    engine: Engine, clock: VirtualClock
) -> None:
    task = {"name": "ft", "run": "torchrun train.py", "envs": {"A": "1"}, "num_nodes": 2}
    with session_scope(engine) as session:
        cluster, intent = create_cluster(
            session,
            name="ft",
            target=TARGET,
            task=task,
            owner="gl-1",
            actor="api",
            now=clock.now(),
            request_id="req-1",
            autostop_minutes=30,
            autostop_down=True,
        )
    with session_scope(engine) as session:
        cluster = get_cluster_by_name(session, "ft")
        assert cluster is not None and cluster.status is ClusterStatus.PENDING
        assert cluster.task == task and cluster.owner == "gl-1" and cluster.spot
        assert (cluster.provider, cluster.zone, cluster.num_nodes) == ("sim", "us-east-1a", 2)
        assert (cluster.autostop_minutes, cluster.autostop_down) == (30, True)
        assert cluster.failover_history == [] and cluster.last_activity_at == clock.now()
        intent = get_intent(session, "req-1")
        assert intent is not None and intent.cluster_id == cluster.id
        assert (intent.status, intent.attempt, intent.num_nodes) == (IntentStatus.PENDING, 0, 2)
        assert [h.to_status for h in history(session, cluster)] == ["pending"]
        assert [h.to_status for h in history(session, intent)] == ["pending"]


def test_cluster_and_intent_are_written_in_one_transaction(
    engine: Engine, clock: VirtualClock
) -> None:
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        create_cluster(
            session, name="x", target=TARGET, task={}, owner="o", actor="a", now=clock.now()
        )
        raise RuntimeError("crash before commit")
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(Cluster)) == 0
        assert session.scalar(select(func.count()).select_from(LaunchIntent)) == 0


def test_a_live_name_is_refused_and_a_terminated_one_is_reused(
    engine: Engine, clock: VirtualClock
) -> None:
    old_id, _ = new_cluster(engine, clock, "dup")
    with pytest.raises(ClusterExists, match="exists"):
        new_cluster(engine, clock, "dup")
    with session_scope(engine) as session:
        old = get_cluster(session, old_id)
        assert old is not None
        ensure_node(session, old, instance_id="i-old", node_rank=0, actor="t", now=clock.now())
    force_status(engine, Cluster, old_id, ClusterStatus.TERMINATED)
    new_id, _ = new_cluster(engine, clock, "dup")
    assert new_id != old_id
    with session_scope(engine) as session:
        assert get_cluster(session, old_id) is None
        assert session.scalar(select(func.count()).select_from(Node)) == 0  # cascaded


def test_a_duplicate_request_id_is_refused(engine: Engine, clock: VirtualClock) -> None:
    with session_scope(engine) as session:
        create_cluster(
            session,
            name="a",
            target=TARGET,
            task={},
            owner="o",
            actor="t",
            now=1.0,
            request_id="same",
        )
    with pytest.raises(ClusterExists), session_scope(engine) as session:
        create_cluster(
            session,
            name="b",
            target=TARGET,
            task={},
            owner="o",
            actor="t",
            now=1.0,
            request_id="same",
        )


def test_list_filters_by_status_and_owner(engine: Engine, clock: VirtualClock) -> None:
    a, _ = new_cluster(engine, clock, "a")
    b, _ = new_cluster(engine, clock, "b")
    force_status(engine, Cluster, b, ClusterStatus.RUNNING)
    with session_scope(engine) as session:
        assert [c.id for c in list_clusters(session)] == [a, b]
        assert [c.id for c in list_clusters(session, statuses=[ClusterStatus.RUNNING])] == [b]
        assert list_clusters(session, owner="someone-else") == []
        assert get_cluster(session, 10_000) is None and get_cluster_by_name(session, "zz") is None


def test_failover_records_history_fails_the_old_intent_and_aims_elsewhere(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, first_request = new_cluster(engine, clock)
    elsewhere = LaunchTarget(provider="sim", region="eu-west-1", zone="eu-west-1b", num_nodes=2)
    for step in range(2):  # from PENDING, then PROVISIONING → PROVISIONING
        clock.advance(10)
        with session_scope(engine) as session:
            cluster = get_cluster(session, cluster_id)
            assert cluster is not None
            new = fail_over(
                session,
                cluster,
                target=elsewhere,
                error=f"no capacity {step}",
                actor="loop",
                now=clock.now(),
            )
            assert new is not None and new.status is IntentStatus.PENDING
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.status is ClusterStatus.PROVISIONING
        assert (cluster.region, cluster.zone) == ("eu-west-1", "eu-west-1b")
        history_ = cluster.failover_history
        assert [(h["region"], h["error"]) for h in history_] == [
            ("us-east-1", "no capacity 0"),
            ("eu-west-1", "no capacity 1"),
        ]
        assert history_[0]["request_id"] == first_request and history_[0]["at"] > 0
        old = get_intent(session, first_request)
        assert old is not None and old.status is IntentStatus.FAILED
        assert old.last_error == "no capacity 0"
        assert len(open_intents(session, cluster_id)) == 1
        changes = [(h.from_status, h.to_status) for h in history(session, cluster)]
        assert changes[-1] == ("provisioning", "provisioning")


def test_failover_of_a_finished_cluster_is_refused(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, cluster_id, ClusterStatus.SUCCEEDED)
    with pytest.raises(InvalidTransition), session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        fail_over(session, cluster, target=TARGET, error="x", actor="t", now=1.0)


def test_concurrent_failover_appends_lose_nothing(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    writers = 4
    barrier = threading.Barrier(writers)

    def append(i: int) -> None:
        barrier.wait()
        with session_scope(engine) as session:
            append_failover(session, cluster_id, target=TARGET, error=f"e{i}", now=float(i))

    threads = [threading.Thread(target=append, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        assert sorted(h["error"] for h in cluster.failover_history) == [f"e{i}" for i in range(4)]
    with pytest.raises(LookupError), session_scope(engine) as session:
        append_failover(session, 10_000, target=TARGET, error="x", now=1.0)


def test_record_activity_stamps_the_cluster(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    with session_scope(engine) as session:
        assert record_activity(session, cluster_id, now=clock.now() + 60)
        assert not record_activity(session, 10_000, now=1.0)
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.last_activity_at == clock.now() + 60


def test_the_owner_id_is_generated_once_and_persisted(engine: Engine) -> None:
    with session_scope(engine) as session:
        owner = server_owner_id(session, now=1.0)
    assert owner.startswith("gl-") and len(owner) == 19
    other = make_engine(engine.url)
    try:
        with session_scope(other) as session:
            assert server_owner_id(session, now=2.0) == owner
    finally:
        other.dispose()


def test_two_processes_starting_at_once_agree_on_the_owner_id(engine: Engine) -> None:
    starters = 4
    barrier = threading.Barrier(starters)
    seen: list[str] = []

    def start() -> None:
        barrier.wait()
        with session_scope(engine) as session:
            seen.append(server_owner_id(session, now=1.0))

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == starters and len(set(seen)) == 1
