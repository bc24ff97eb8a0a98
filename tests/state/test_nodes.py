"""Node rows: idempotent by instance, agent tokens stored hashed only, heartbeats counted
atomically."""

from __future__ import annotations

import threading

from sqlalchemy import Engine, text

from gpulease.clock import VirtualClock
from gpulease.state import (
    NodeState,
    ensure_node,
    get_cluster,
    history,
    issue_agent_token,
    list_nodes,
    record_exit_code,
    record_heartbeat,
    record_missed_heartbeat,
    session_scope,
    verify_token,
)
from gpulease.state.models import Base, Node
from tests.state.helpers import force_status, new_cluster


def _node(engine: Engine, clock: VirtualClock, instance_id: str = "i-1", rank: int = 0) -> int:
    cluster_id, _ = new_cluster(engine, clock)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        return ensure_node(
            session, cluster, instance_id=instance_id, node_rank=rank, actor="t", now=clock.now()
        ).id


def test_ensure_node_is_idempotent_by_instance(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    with session_scope(engine) as session:
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        first = ensure_node(session, cluster, instance_id="i-1", node_rank=0, actor="t", now=1.0)
        again = ensure_node(
            session,
            cluster,
            instance_id="i-1",
            node_rank=0,
            actor="t",
            now=2.0,
            agent_url="http://127.0.0.1:9000",
        )
        second = ensure_node(session, cluster, instance_id="i-2", node_rank=1, actor="t", now=2.0)
        assert again.id == first.id and first.agent_url == "http://127.0.0.1:9000"
        assert first.state is NodeState.PROVISIONING and first.provider == "sim"
        assert [h.to_status for h in history(session, first)] == ["provisioning"]
    force_status(engine, Node, second.id, NodeState.TERMINATED)
    with session_scope(engine) as session:
        assert [n.instance_id for n in list_nodes(session, cluster_id)] == ["i-1", "i-2"]
        assert [n.instance_id for n in list_nodes(session, cluster_id, live_only=True)] == ["i-1"]


def test_the_agent_token_is_stored_only_as_its_hash(engine: Engine, clock: VirtualClock) -> None:
    node_id = _node(engine, clock)
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None
        token = issue_agent_token(session, node, now=clock.now())
    plain = token.get_secret_value()
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None and verify_token(token, node.agent_token_hash)
        assert plain not in repr(node)
        for table in Base.metadata.sorted_tables:  # the plaintext is nowhere in the database
            for row in session.execute(text(f"SELECT * FROM {table.name}")):
                assert plain not in str(tuple(row)), table.name
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None
        issue_agent_token(session, node, now=clock.now())
        assert not verify_token(token, node.agent_token_hash)  # rotated: the old one is void


def test_heartbeats_reset_and_misses_count_atomically(engine: Engine, clock: VirtualClock) -> None:
    node_id = _node(engine, clock)
    misses = 8
    barrier = threading.Barrier(misses)
    counts: list[int | None] = []

    def miss() -> None:
        barrier.wait()
        with session_scope(engine) as session:
            counts.append(record_missed_heartbeat(session, node_id, now=clock.now()))

    threads = [threading.Thread(target=miss) for _ in range(misses)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(counts) == list(range(1, misses + 1))
    with session_scope(engine) as session:
        assert record_heartbeat(session, node_id, now=clock.now() + 5)
        node = session.get(Node, node_id)
        assert node is not None
        assert (node.missed_heartbeats, node.last_heartbeat_at) == (0, clock.now() + 5)
        assert record_missed_heartbeat(session, 10_000, now=1.0) is None
        assert not record_heartbeat(session, 10_000, now=1.0)


def test_exit_codes_are_recorded(engine: Engine, clock: VirtualClock) -> None:
    node_id = _node(engine, clock)
    with session_scope(engine) as session:
        assert record_exit_code(session, node_id, 75, now=clock.now())
        assert not record_exit_code(session, 10_000, 0, now=clock.now())
    with session_scope(engine) as session:
        node = session.get(Node, node_id)
        assert node is not None and node.exit_code == 75
