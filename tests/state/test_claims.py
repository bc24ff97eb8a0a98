"""Reconcile claims: one worker per cluster at a time, expiry hands a dead worker's cluster on,
and writes guarded by a lost claim change nothing."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.state import (
    Claim,
    ClusterStatus,
    IntentStatus,
    claim,
    claim_next,
    get_cluster,
    get_intent,
    release,
    renew,
    session_scope,
    set_status,
)
from gpulease.state.models import Cluster
from tests.state.helpers import force_status, new_cluster


def _claim(engine: Engine, cluster_id: int, worker: str, until: float, now: float) -> Claim | None:
    with session_scope(engine) as session:
        return claim(session, cluster_id, worker, until=until, now=now)


def test_a_claimed_cluster_cannot_be_claimed_again_until_released(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    now = clock.now()
    first = _claim(engine, cluster_id, "w1", now + 60, now)
    assert first is not None and first.worker == "w1"
    assert _claim(engine, cluster_id, "w2", now + 60, now + 1) is None
    assert _claim(engine, cluster_id, "w1", now + 60, now + 1) is None  # not re-entrant
    with session_scope(engine) as session:
        assert release(session, first, now=now + 2)
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        assert cluster.lock_token is None and cluster.last_processed_at == now + 2
    assert _claim(engine, cluster_id, "w2", now + 60, now + 3) is not None


def test_an_expired_claim_passes_to_another_worker_and_the_first_loses_it(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    now = clock.now()
    dead = _claim(engine, cluster_id, "dead", now + 30, now)
    assert dead is not None
    assert _claim(engine, cluster_id, "w2", now + 90, now + 29.9) is None
    alive = _claim(engine, cluster_id, "w2", now + 90, now + 30)
    assert alive is not None and alive.token != dead.token
    with session_scope(engine) as session:
        assert renew(session, dead, until=now + 200) is None
        assert not release(session, dead, now=now + 31)
        cluster = get_cluster(session, cluster_id)
        assert cluster is not None
        assert not set_status(
            session,
            cluster,
            ClusterStatus.PROVISIONING,
            actor="dead",
            reason="late",
            now=now + 31,
            claim=dead,
        )
        assert set_status(
            session,
            cluster,
            ClusterStatus.PROVISIONING,
            actor="w2",
            reason="ok",
            now=now + 31,
            claim=alive,
        )
        renewed = renew(session, alive, until=now + 500)
        assert renewed is not None and renewed.until == now + 500


def test_claim_guards_writes_to_the_clusters_intents(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, request_id = new_cluster(engine, clock)
    other_id, _ = new_cluster(engine, clock)
    now = clock.now()
    held = _claim(engine, other_id, "w", now + 60, now)
    assert held is not None
    with session_scope(engine) as session:
        intent = get_intent(session, request_id)
        assert intent is not None
        # a claim on another cluster does not cover this cluster's intent
        assert not set_status(
            session, intent, IntentStatus.SUBMITTED, actor="w", reason="r", now=now, claim=held
        )
    mine = _claim(engine, cluster_id, "w", now + 60, now)
    assert mine is not None
    with session_scope(engine) as session:
        intent = get_intent(session, request_id)
        assert intent is not None
        assert set_status(
            session, intent, IntentStatus.SUBMITTED, actor="w", reason="r", now=now, claim=mine
        )


def test_claim_next_takes_the_least_recently_processed_free_cluster(
    engine: Engine, clock: VirtualClock
) -> None:
    a, _ = new_cluster(engine, clock, "a")
    b, _ = new_cluster(engine, clock, "b")
    gone, _ = new_cluster(engine, clock, "gone")
    force_status(engine, Cluster, gone, ClusterStatus.TERMINATED)
    now = clock.now()
    with session_scope(engine) as session:
        first = claim_next(session, "w1", until=now + 60, now=now)
        assert first is not None and first.cluster_id == a
        assert release(session, first, now=now + 1)
    with session_scope(engine) as session:
        second = claim_next(session, "w1", until=now + 60, now=now + 2)
        assert second is not None and second.cluster_id == b  # a was processed more recently
        third = claim_next(session, "w2", until=now + 60, now=now + 2)
        assert third is not None and third.cluster_id == a
        assert claim_next(session, "w3", until=now + 60, now=now + 2) is None  # gone is final
        only = frozenset({ClusterStatus.TERMINATED})
        assert claim_next(session, "w3", until=now + 60, now=now + 2, statuses=only) is not None


def test_concurrent_workers_never_claim_the_same_cluster(
    engine: Engine, clock: VirtualClock
) -> None:
    ids = {new_cluster(engine, clock)[0] for _ in range(2)}
    now = clock.now()
    workers = 4
    barrier = threading.Barrier(workers)
    got: list[Claim | None] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        barrier.wait()
        with session_scope(engine) as session:
            result = claim_next(session, name, until=now + 60, now=now)
        with lock:
            got.append(result)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    claimed = [c.cluster_id for c in got if c is not None]
    assert sorted(claimed) == sorted(ids)  # each cluster exactly once, two workers got nothing


def test_a_claim_must_end_in_the_future(engine: Engine, clock: VirtualClock) -> None:
    cluster_id, _ = new_cluster(engine, clock)
    with pytest.raises(ValueError, match="after now"):
        _claim(engine, cluster_id, "w", clock.now(), clock.now())
