"""set_status on a real database (SQLite and PostgreSQL): the table is enforced, every change is a
compare-and-set with a history row, races have exactly one winner, timeouts are found."""

from __future__ import annotations

import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, func, select

from gpulease.clock import VirtualClock
from gpulease.state import (
    TRANSIENT_TIMEOUTS,
    TRANSITIONS,
    ClusterStatus,
    IntentStatus,
    InvalidTransition,
    NodeState,
    ensure_node,
    get_cluster,
    get_intent,
    history,
    list_timed_out,
    session_scope,
    set_status,
    timed_out,
)
from gpulease.state.models import Cluster, LaunchIntent, Node, StatusChange
from tests.state.helpers import force_status, new_cluster

C = ClusterStatus


def _move(engine: Engine, cluster_id: int, new: ClusterStatus, now: float, **kw: object) -> bool:
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        return set_status(session, cluster, new, actor="test", reason="r", now=now, **kw)


def test_every_allowed_cluster_transition_is_written(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    for current, targets in TRANSITIONS[ClusterStatus].items():
        for new in sorted(targets, key=str):
            force_status(engine, Cluster, cluster_id, current)
            assert _move(engine, cluster_id, new, clock.now()), f"{current} → {new}"
            with session_scope(engine) as session:
                assert get_cluster(session, cluster_id).status is new


def test_every_allowed_node_and_intent_transition_is_written(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, request_id = new_cluster(engine, clock)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        node = ensure_node(session, cluster, instance_id="i-1", node_rank=0, actor="t", now=1.0)
        node_id = node.id
        intent_id = get_intent(session, request_id).id
    cases = [(Node, node_id, NodeState), (LaunchIntent, intent_id, IntentStatus)]
    for model, row_id, enum_cls in cases:
        for current, targets in TRANSITIONS[enum_cls].items():
            for new in sorted(targets, key=str):
                force_status(engine, model, row_id, current)
                with session_scope(engine) as session:
                    row = session.get(model, row_id)
                    assert set_status(session, row, new, actor="t", reason="r", now=clock.now())


@pytest.mark.parametrize(
    ("current", "new"),
    [(C.PENDING, C.RUNNING), (C.TERMINATED, C.PROVISIONING), (C.RUNNING, C.TERMINATED)],
)
def test_forbidden_transition_raises_and_writes_nothing(
    engine: Engine, clock: VirtualClock, current: ClusterStatus, new: ClusterStatus
) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, cluster_id, current)
    with pytest.raises(InvalidTransition):
        _move(engine, cluster_id, new, clock.now())
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.status is current
        assert [h.to_status for h in history(session, cluster)] == ["pending"]


def test_a_status_of_another_machine_is_refused(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    with session_scope(engine) as session, pytest.raises(TypeError):
        cluster = get_cluster(session, cluster_id)
        set_status(session, cluster, IntentStatus.FAILED, actor="t", reason="r", now=1.0)


def test_history_records_from_to_time_actor_and_reason(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    created = clock.now()
    clock.advance(5)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        set_status(
            session, cluster, C.PROVISIONING, actor="loop-1", reason="launched", now=clock.now()
        )
        assert cluster.status is C.PROVISIONING and cluster.status_changed_at == clock.now()
    with session_scope(engine) as session:
        rows = history(session, get_cluster(session, cluster_id))
        got = [(r.from_status, r.to_status, r.at, r.actor, r.reason) for r in rows]
    assert got == [
        (None, "pending", created, "test", "created"),
        ("pending", "provisioning", created + 5, "loop-1", "launched"),
    ]


def test_stale_expected_status_changes_nothing(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, cluster_id, C.RUNNING)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        moved = set_status(
            session, cluster, C.PROVISIONING, expected=C.PENDING, actor="t", reason="r", now=9.0
        )
        assert moved is False
        assert cluster.status is C.RUNNING  # reloaded: the caller sees who won
        assert session.scalar(select(func.count()).select_from(StatusChange)) == 2  # cluster+intent


def test_two_sessions_race_and_the_second_loses(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, cluster_id, C.RUNNING)
    with session_scope(engine) as first, session_scope(engine) as second:
        mine = get_cluster(first, cluster_id)
        theirs = get_cluster(second, cluster_id)
        assert mine is not None and theirs is not None
        assert mine.status is theirs.status is C.RUNNING
        assert set_status(first, mine, C.STOPPING, actor="a", reason="autostop", now=1.0)
        first.commit()
        assert not set_status(second, theirs, C.TERMINATING, actor="b", reason="down", now=2.0)
        assert theirs.status is C.STOPPING
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.status is C.STOPPING
        assert [h.actor for h in history(session, cluster)] == ["test", "a"]


def test_concurrent_writers_have_exactly_one_winner(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, cluster_id, C.RUNNING)
    targets = [C.SUCCEEDED, C.FAILED, C.STOPPING, C.TERMINATING]
    barrier = threading.Barrier(len(targets))
    results: dict[ClusterStatus, bool] = {}

    def writer(new: ClusterStatus) -> None:
        with session_scope(engine) as session:
            cluster = get_cluster(session, cluster_id)
            assert cluster is not None
            barrier.wait()
            results[new] = set_status(
                session, cluster, new, expected=C.RUNNING, actor=new.value, reason="r", now=1.0
            )

    threads = [threading.Thread(target=writer, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sum(results.values()) == 1, results
    winner = next(t for t, won in results.items() if won)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.status is winner
        assert [h.to_status for h in history(session, cluster)] == ["pending", winner.value]


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(walk=st.lists(st.sampled_from(list(ClusterStatus)), min_size=1, max_size=12))
def test_random_walks_on_the_database_match_the_table_and_the_history(
    engine: Engine, walk: list[ClusterStatus]
) -> None:
    clock = VirtualClock()
    cluster_id, _ = new_cluster(engine, clock, name=f"walk-{uuid.uuid4().hex}")
    expected = [("pending", None)]
    status = C.PENDING
    for new in walk:
        clock.advance(1)
        if new in TRANSITIONS[ClusterStatus][status]:
            assert _move(engine, cluster_id, new, clock.now())
            expected.append((new.value, status.value))
            status = new
        else:
            with pytest.raises(InvalidTransition):
                _move(engine, cluster_id, new, clock.now())
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None and cluster.status is status
        assert [(h.to_status, h.from_status) for h in history(session, cluster)] == expected


def test_timeouts_are_found_and_give_the_exit(engine: Engine, clock: VirtualClock) -> None:
    stuck, _ = new_cluster(engine, clock)
    running, _ = new_cluster(engine, clock)
    force_status(engine, Cluster, stuck, C.SETTING_UP, at=clock.now())
    force_status(engine, Cluster, running, C.RUNNING, at=clock.now())
    limit = TRANSIENT_TIMEOUTS[ClusterStatus][C.SETTING_UP].seconds
    with session_scope(engine) as session:
        clusters = list_timed_out(session, Cluster, clock.now() + limit - 1)
        assert [c.id for c in clusters] == []
        clusters = list_timed_out(session, Cluster, clock.now() + limit)
        assert [c.id for c in clusters] == [stuck]
        assert timed_out(clusters[0], clock.now() + limit) is C.FAILED
        assert timed_out(get_cluster(session, running), clock.now() + 1e9) is None


def test_a_failover_self_transition_restarts_the_provisioning_timer(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    assert _move(engine, cluster_id, C.PROVISIONING, clock.now())
    limit = TRANSIENT_TIMEOUTS[ClusterStatus][C.PROVISIONING].seconds
    clock.advance(limit - 10)
    assert _move(engine, cluster_id, C.PROVISIONING, clock.now())
    with session_scope(engine) as session:
        assert list_timed_out(session, Cluster, clock.now() + 20) == []
        assert [c.id for c in list_timed_out(session, Cluster, clock.now() + limit)] == [cluster_id]
