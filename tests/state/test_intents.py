"""Intent before side effect: the side effect runs only for a committed, open intent, outside any
transaction, and its outcome (or a crash in the middle) leaves the intent in a state the next pass
can finish from."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from gpulease.clock import VirtualClock
from gpulease.errors import Permanent, Retryable
from gpulease.state import (
    IntentClosed,
    IntentStatus,
    IntentView,
    get_intent,
    history,
    make_engine,
    session_scope,
    submit_intent,
)
from tests.state.helpers import TARGET, new_cluster


def _intent(engine: Engine, request_id: str) -> tuple[IntentStatus, int, str | None]:
    with session_scope(engine) as session:
        intent = get_intent(session, request_id)
        assert intent is not None
        return intent.status, intent.attempt, intent.last_error


def test_the_side_effect_sees_a_committed_intent_and_holds_no_lock(
    engine: Engine, clock: VirtualClock
) -> None:
    cluster_id, request_id = new_cluster(engine, clock, "c1")
    probe = make_engine(engine.url, busy_timeout_s=2)

    def launch(view: IntentView) -> list[str]:
        assert (view.request_id, view.cluster_id, view.cluster_name) == (
            request_id,
            cluster_id,
            "c1",
        )
        assert (view.provider, view.zone, view.num_nodes, view.attempt) == (
            "sim",
            TARGET.zone,
            2,
            1,
        )
        with session_scope(probe) as session:  # another connection: sees it, and can write it
            if probe.dialect.name == "postgresql":
                session.execute(text("SET LOCAL lock_timeout = '2s'"))
            intent = get_intent(session, request_id)
            assert intent is not None and intent.status is IntentStatus.PENDING
            intent.updated_at = clock.now()
        return ["i-1", "i-2"]

    try:
        assert submit_intent(engine, request_id, launch, clock=clock, actor="loop") == [
            "i-1",
            "i-2",
        ]
    finally:
        probe.dispose()
    assert _intent(engine, request_id) == (IntentStatus.SUBMITTED, 1, None)
    with session_scope(engine) as session:
        intent = get_intent(session, request_id)
        assert intent is not None
        assert [(h.to_status, h.reason) for h in history(session, intent)][-1] == (
            "submitted",
            "accepted",
        )


def test_a_permanent_error_fails_the_intent_and_it_never_runs_again(
    engine: Engine, clock: VirtualClock
) -> None:
    _, request_id = new_cluster(engine, clock)

    def refused(view: IntentView) -> None:
        raise Permanent("instance type unknown")

    with pytest.raises(Permanent, match="unknown"):
        submit_intent(engine, request_id, refused, clock=clock, actor="loop")
    status, attempt, error = _intent(engine, request_id)
    assert (status, attempt) == (IntentStatus.FAILED, 1)
    assert error == "Permanent: instance type unknown"
    called: list[IntentView] = []
    with pytest.raises(IntentClosed, match="failed"):
        submit_intent(engine, request_id, called.append, clock=clock, actor="loop")
    assert called == []


def test_a_retryable_error_leaves_the_intent_open_for_the_next_pass(
    engine: Engine, clock: VirtualClock
) -> None:
    _, request_id = new_cluster(engine, clock)

    def throttled(view: IntentView) -> None:
        raise Retryable("throttled", delay=5)

    with pytest.raises(Retryable):
        submit_intent(engine, request_id, throttled, clock=clock, actor="loop")
    assert _intent(engine, request_id) == (IntentStatus.PENDING, 1, "Retryable: throttled")
    attempts: list[int] = []

    def launch(view: IntentView) -> str:
        attempts.append(view.attempt)
        return view.request_id

    assert submit_intent(engine, request_id, launch, clock=clock, actor="loop") == request_id
    assert attempts == [2]
    assert _intent(engine, request_id)[:2] == (IntentStatus.SUBMITTED, 2)


def test_a_crash_inside_the_side_effect_is_finished_by_the_next_pass(
    engine: Engine, clock: VirtualClock
) -> None:
    _, request_id = new_cluster(engine, clock)
    launched: dict[str, int] = {}  # an idempotent provider: one launch per request id

    def crash(view: IntentView) -> None:
        launched.setdefault(view.request_id, view.attempt)
        raise KeyboardInterrupt  # the process dies after the provider accepted

    with pytest.raises(KeyboardInterrupt):
        submit_intent(engine, request_id, crash, clock=clock, actor="loop")
    assert _intent(engine, request_id) == (IntentStatus.PENDING, 1, None)

    def launch(view: IntentView) -> int:
        return launched.setdefault(view.request_id, view.attempt)

    assert submit_intent(engine, request_id, launch, clock=clock, actor="loop") == 1
    assert launched == {request_id: 1}
    assert _intent(engine, request_id)[0] is IntentStatus.SUBMITTED
    # a SUBMITTED intent may be re-sent (the provider answers with the same instances)
    assert submit_intent(engine, request_id, launch, clock=clock, actor="loop") == 1
    assert _intent(engine, request_id)[:2] == (IntentStatus.SUBMITTED, 3)


def test_an_unknown_intent_is_closed(engine: Engine, clock: VirtualClock) -> None:
    with pytest.raises(IntentClosed, match="unknown"):
        submit_intent(engine, "no-such-request", lambda view: None, clock=clock, actor="loop")
