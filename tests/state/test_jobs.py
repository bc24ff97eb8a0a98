"""Managed-job rows on a real SQLite DB: create_job (PENDING with its history row), the JobStatus
table enforced by set_status, the event list cap, list_jobs, job_clusters, job timeouts and the
jobs table of the migrations."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, inspect

from gpulease.clock import VirtualClock
from gpulease.state import (
    TRANSITIONS,
    Cluster,
    InvalidTransition,
    Job,
    JobStatus,
    add_event,
    create_job,
    get_job,
    history,
    job_clusters,
    list_jobs,
    list_timed_out,
    session_scope,
    set_status,
)
from gpulease.state.jobs import MAX_EVENTS
from gpulease.state.models import Base
from tests.state.helpers import new_cluster

J = JobStatus


@pytest.fixture
def db_kind() -> str:
    """Only SQLite here: fast unit tests of the job rows."""
    return "sqlite"


def new_job(engine: Engine, clock: VirtualClock, name: str = "train", **kw: object) -> int:
    with session_scope(engine) as session:
        job = create_job(session, name=name, task={"task_id": "t"}, owner="gl-test",
                         actor="test", now=clock.now(), **kw)  # type: ignore[arg-type]  # fmt: skip
        return job.id


def move(engine: Engine, job_id: int, new: JobStatus, now: float, **kw: object) -> bool:
    with session_scope(engine) as session:
        job = get_job(session, job_id)
        assert job is not None
        return set_status(session, job, new, actor="test", reason=f"to {new}", now=now, **kw)  # type: ignore[arg-type]


def test_create_job_writes_a_pending_row_and_its_history(
    engine: Engine, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock)
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        assert (job.status, job.status_changed_at, job.created_at) == (
            J.PENDING, clock.now(), clock.now()
        )  # fmt: skip
        assert (job.attempt, job.cluster_id, job.recoveries, job.restarts) == (0, None, 0, 0)
        assert (job.blocked, job.events, job.cost_usd, job.run_s) == ([], [], 0.0, 0.0)
        assert (job.cancel_requested, job.pending_stop, job.failure) == (False, None, None)
        assert (job.task, job.clock) == ({"task_id": "t"}, "system")
        assert job.started_at_job == clock.now()
        (created,) = history(session, job)
        assert (created.entity_kind, created.entity_id) == ("job", jid)
        assert (created.from_status, created.to_status) == (None, "pending")
        assert (created.actor, created.reason, created.at) == ("test", "launched", clock.now())


def test_create_job_keeps_a_given_job_clock_start(engine: Engine, clock: VirtualClock) -> None:
    with session_scope(engine) as session:
        created = create_job(session, name="sim-job", task={}, owner="gl-test", actor="test",
                             now=clock.now(), clock="sim", started_at_job=42.0)  # fmt: skip
        jid = created.id
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        assert (job.clock, job.started_at_job, job.status) == ("sim", 42.0, J.PENDING)


def test_set_status_moves_a_job_with_history(engine: Engine, clock: VirtualClock) -> None:
    jid = new_job(engine, clock)
    path = [J.STARTING, J.RUNNING, J.RECOVERING, J.STARTING, J.RUNNING, J.SUCCEEDED]
    for i, status in enumerate(path, start=1):
        assert move(engine, jid, status, clock.now() + i)
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        assert (job.status, job.status_changed_at) == (J.SUCCEEDED, clock.now() + len(path))
        changes = history(session, job)
        assert all(c.entity_kind == "job" for c in changes)
        assert [c.to_status for c in changes] == ["pending", *(s.value for s in path)]


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ([J.STARTING, J.RUNNING, J.SUCCEEDED], J.RUNNING),
        ([J.CANCELLING, J.CANCELLED], J.CANCELLING),
        ([J.FAILED], J.STARTING),
        ([], J.RUNNING),
        ([J.STARTING, J.RUNNING], J.STARTING),
        ([J.CANCELLING], J.RUNNING),
    ],
)
def test_set_status_refuses_moves_outside_the_job_table(
    engine: Engine, clock: VirtualClock, path: list[JobStatus], bad: JobStatus
) -> None:
    jid = new_job(engine, clock)
    for status in path:
        assert move(engine, jid, status, clock.now())
    current = path[-1] if path else J.PENDING
    assert bad not in TRANSITIONS[JobStatus][current]
    with pytest.raises(InvalidTransition) as info:
        move(engine, jid, bad, clock.now())
    assert info.value.kind == "job"
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None and job.status is current
        assert len(history(session, job)) == 1 + len(path)


def test_set_status_refuses_a_status_of_another_machine(
    engine: Engine, clock: VirtualClock
) -> None:
    from gpulease.state import ClusterStatus

    jid = new_job(engine, clock)
    with pytest.raises(TypeError, match="JobStatus"):
        move(engine, jid, ClusterStatus.PROVISIONING, clock.now())  # type: ignore[arg-type]


def test_set_status_on_a_job_is_a_compare_and_set(engine: Engine, clock: VirtualClock) -> None:
    jid = new_job(engine, clock)
    assert move(engine, jid, J.STARTING, clock.now())
    # a writer that still believes the job PENDING loses, and changes nothing
    assert not move(engine, jid, J.CANCELLING, clock.now(), expected=J.PENDING)
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None and job.status is J.STARTING
        assert len(history(session, job)) == 2


def test_add_event_keeps_the_newest_events(engine: Engine, clock: VirtualClock) -> None:
    jid = new_job(engine, clock)
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        for i in range(MAX_EVENTS + 50):
            add_event(job, {"kind": "attempt", "n": i})
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        assert MAX_EVENTS == 200
        assert [e["n"] for e in job.events] == list(range(50, MAX_EVENTS + 50))


def test_add_event_copies_the_event_and_persists_each_append(
    engine: Engine, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock)
    event = {"kind": "preemption"}
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        add_event(job, event)
    event["kind"] = "changed later"
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        add_event(job, {"kind": "restart"})
    with session_scope(engine) as session:
        job = get_job(session, jid)
        assert job is not None
        assert [e["kind"] for e in job.events] == ["preemption", "restart"]


def test_list_jobs_hides_final_jobs_unless_asked(engine: Engine, clock: VirtualClock) -> None:
    ids = {name: new_job(engine, clock, name=name) for name in ("a", "b", "c", "d", "e")}
    move(engine, ids["b"], J.FAILED, clock.now())
    move(engine, ids["c"], J.CANCELLING, clock.now())
    move(engine, ids["c"], J.CANCELLED, clock.now())
    move(engine, ids["d"], J.STARTING, clock.now())
    move(engine, ids["d"], J.SUCCEEDED, clock.now())
    move(engine, ids["e"], J.CANCELLING, clock.now())
    with session_scope(engine) as session:
        assert [j.name for j in list_jobs(session)] == ["a", "b", "c", "d", "e"]
        assert [j.name for j in list_jobs(session, include_done=False)] == ["a", "e"]


def test_job_clusters_lists_the_jobs_attempts_oldest_first(
    engine: Engine, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock)
    other = new_job(engine, clock, name="other")
    first, _ = new_cluster(engine, clock)
    stray, _ = new_cluster(engine, clock)
    second, _ = new_cluster(engine, clock)
    mine, theirs = (first, second), (stray,)
    with session_scope(engine) as session:
        for cid in mine:
            cluster = session.get(Cluster, cid)
            assert cluster is not None
            cluster.job_id = jid
        for cid in theirs:
            cluster = session.get(Cluster, cid)
            assert cluster is not None
            cluster.job_id = other
    with session_scope(engine) as session:
        assert [c.id for c in job_clusters(session, jid)] == [first, second]
        assert [c.id for c in job_clusters(session, other)] == [stray]
        assert job_clusters(session, 999) == []


def test_jobs_past_their_status_timeout_are_found(engine: Engine, clock: VirtualClock) -> None:
    pending = new_job(engine, clock, name="pending")
    starting = new_job(engine, clock, name="starting")
    move(engine, starting, J.STARTING, clock.now())
    clock.advance(10 * 60.0)  # PENDING times out at 10 min, STARTING at 60 min
    with session_scope(engine) as session:
        assert [j.id for j in list_timed_out(session, Job, clock.now())] == [pending]
    clock.advance(50 * 60.0)
    with session_scope(engine) as session:
        assert [j.id for j in list_timed_out(session, Job, clock.now())] == [pending, starting]


def test_the_migrated_jobs_table_has_every_column_of_the_model(engine: Engine) -> None:
    inspector = inspect(engine)
    columns = {c["name"] for c in inspector.get_columns("jobs")}
    assert columns == set(Base.metadata.tables["jobs"].columns.keys())
    cluster_columns = {c["name"] for c in inspector.get_columns("clusters")}
    assert {"job_id", "failure"} <= cluster_columns
