"""The managed-jobs rules: ``decide_job`` straight from snapshots (every rule of the module's
table, the timeouts, a property test against the JobStatus transition table), the job loop's
naming helpers, and a few ``JobReconciler.step`` runs on a real SQLite DB with the doubles."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from gpulease.clock import VirtualClock
from gpulease.controller.job_document import JobDocument, JobPolicy
from gpulease.controller.job_loop import JobReconciler, attempt_name, job_task_id
from gpulease.controller.job_rules import (
    AttemptView,
    EndAttempt,
    JobAction,
    JobConfig,
    JobSnapshot,
    JobView,
    Recover,
    RequestStop,
    SetJob,
    StartAttempt,
    decide_job,
)
from gpulease.state import (
    Cluster,
    ClusterStatus,
    Job,
    JobStatus,
    LaunchTarget,
    NodeState,
    create_job,
    ensure_node,
    history,
    job_clusters,
    session_scope,
    set_status,
)
from gpulease.state.machines import allowed
from gpulease.wire import TASK_ID_PATTERN, RunSpec
from tests.controller.conftest import OWNER
from tests.controller.doubles import FakeAgents, FakeProvider

J = JobStatus
C = ClusterStatus
MIN = 60.0
NOW = 1_000_000.0
CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

SPOT = LaunchTarget(
    "fake", "r1", "z1", "t1", num_nodes=1, pricing="spot", price_per_hour=4.0
)  # fmt: skip
OD = LaunchTarget("fake", "r1", None, "t1", num_nodes=1, pricing="on_demand", price_per_hour=10.0)


@pytest.fixture
def db_kind() -> str:
    """Only SQLite here: these are fast unit tests (the state tests run PostgreSQL too)."""
    return "sqlite"


# ---- snapshot builders ------------------------------------------------------------------------


def make_doc(
    spot: tuple[LaunchTarget, ...] = (SPOT,),
    on_demand: tuple[LaunchTarget, ...] = (OD,),
    **policy: Any,
) -> JobDocument:
    return JobDocument(
        run=RunSpec(run="python train.py"),
        task_id="job-train-1",
        spot=spot,
        on_demand=on_demand,
        policy=JobPolicy(**policy),
    )


def make_job(status: JobStatus = J.RUNNING, **kw: Any) -> JobView:
    base = JobView(
        id=1,
        name="train",
        status=status,
        status_changed_at=NOW,
        doc=make_doc(),
        attempt=1,
        pricing="spot",
        recoveries=0,
        restarts=0,
        cost_usd=0.0,
        run_s=0.0,
        started_at_job=0.0,
        next_attempt_at=None,
        cancel_requested=False,
        pending_stop=None,
    )
    return dataclasses.replace(base, **kw)


def make_attempt(
    status: ClusterStatus = C.RUNNING,
    *,
    failure: str | None = None,
    target: LaunchTarget = SPOT,
    nodes: tuple[NodeState, ...] = (NodeState.READY,),
    reason: str = "",
) -> AttemptView:
    return AttemptView(
        id=7,
        name="train-1-1",
        status=status,
        failure=failure,
        target=target,
        node_states=nodes,
        reason=reason,
    )


_NO_ATTEMPT: Any = object()


def snap(
    status: JobStatus = J.RUNNING,
    att: AttemptView | None = _NO_ATTEMPT,
    *,
    now: float = NOW,
    others_live: bool = False,
    wanted_mode: str | None = None,
    spot_price: float | None = None,
    spot_limit: float | None = None,
    **job: Any,
) -> JobSnapshot:
    return JobSnapshot(
        now=now,
        now_job=now,
        job=make_job(status, **job),
        attempt=make_attempt() if att is _NO_ATTEMPT else att,
        others_live=others_live,
        wanted_mode=wanted_mode,
        spot_price=spot_price,
        spot_limit=spot_limit,
    )


def kinds(actions: list[JobAction]) -> list[type]:
    return [type(a) for a in actions]


# ---- PENDING, STARTING, RUNNING ---------------------------------------------------------------


def test_a_pending_job_starts_its_first_attempt() -> None:
    assert decide_job(snap(J.PENDING, None, attempt=0)) == [StartAttempt()]


def test_a_pending_job_without_any_target_fails_with_no_offer() -> None:
    actions = decide_job(snap(J.PENDING, None, doc=make_doc(spot=(), on_demand=())))
    assert len(actions) == 1
    (action,) = actions
    assert isinstance(action, SetJob)
    assert (action.status, action.failure) == (J.FAILED, "no_offer")


def test_a_pending_job_with_only_spot_targets_still_starts() -> None:
    assert decide_job(snap(J.PENDING, None, doc=make_doc(on_demand=()))) == [StartAttempt()]


def test_starting_moves_to_running_when_the_attempt_runs() -> None:
    actions = decide_job(snap(J.STARTING, make_attempt(C.RUNNING)))
    assert kinds(actions) == [SetJob]
    assert isinstance(actions[0], SetJob) and actions[0].status is J.RUNNING


@pytest.mark.parametrize("cluster", [C.PENDING, C.PROVISIONING, C.SETTING_UP])
def test_starting_waits_while_the_attempt_comes_up(cluster: ClusterStatus) -> None:
    assert decide_job(snap(J.STARTING, make_attempt(cluster, nodes=()))) == []


def test_running_with_a_healthy_attempt_and_no_policy_does_nothing() -> None:
    assert decide_job(snap(J.RUNNING, make_attempt(C.RUNNING))) == []


@pytest.mark.parametrize("status", [J.STARTING, J.RUNNING])
def test_a_succeeded_attempt_succeeds_the_job_and_is_taken_down(status: JobStatus) -> None:
    actions = decide_job(snap(status, make_attempt(C.SUCCEEDED)))
    assert actions == [SetJob(J.SUCCEEDED, "the task succeeded"), EndAttempt("job succeeded")]


@pytest.mark.parametrize(
    ("target", "block"), [(SPOT, True), (OD, False)], ids=["spot", "on_demand"]
)  # fmt: skip
def test_an_infra_failure_recovers_as_a_preemption(target: LaunchTarget, block: bool) -> None:
    attempt = make_attempt(C.FAILED, failure="infra", target=target, reason="node died")
    actions = decide_job(snap(J.RUNNING, attempt))
    assert actions == [EndAttempt("node died"), Recover("preemption", "node died", block=block)]


def test_a_task_failure_with_restarts_left_restarts() -> None:
    attempt = make_attempt(C.FAILED, failure="task", reason="exit 1")
    doc = make_doc(max_restarts_on_errors=2)
    actions = decide_job(snap(J.RUNNING, attempt, doc=doc, restarts=1))
    assert actions == [EndAttempt("exit 1"), Recover("restart", "exit 1")]


def test_a_task_failure_without_restarts_left_fails_the_job() -> None:
    attempt = make_attempt(C.FAILED, failure="task", reason="exit 1")
    doc = make_doc(max_restarts_on_errors=2)
    actions = decide_job(snap(J.RUNNING, attempt, doc=doc, restarts=2))
    assert kinds(actions) == [EndAttempt, SetJob]
    final = actions[1]
    assert isinstance(final, SetJob)
    assert (final.status, final.failure) == (J.FAILED, "task")
    assert "exit 1" in final.reason


def test_a_task_failure_with_no_restarts_configured_fails_at_once() -> None:
    attempt = make_attempt(C.FAILED, failure="task")
    actions = decide_job(snap(J.STARTING, attempt))
    assert isinstance(actions[-1], SetJob) and actions[-1].failure == "task"
    # without a recorded reason the attempt's name and status explain it
    assert "train-1-1 failed" in actions[-1].reason


def test_a_launch_failure_recovers_with_kind_launch() -> None:
    attempt = make_attempt(C.FAILED, failure="launch", reason="no capacity", nodes=())
    actions = decide_job(snap(J.STARTING, attempt))
    assert actions == [EndAttempt("no capacity"), Recover("launch", "no capacity")]


@pytest.mark.parametrize("cluster", [C.TERMINATING, C.TERMINATED])
def test_an_attempt_taken_down_by_someone_else_is_a_preemption(cluster: ClusterStatus) -> None:
    actions = decide_job(snap(J.RUNNING, make_attempt(cluster, reason="user down")))
    # already going: nothing to end, recover (spot: block the zone)
    assert actions == [Recover("preemption", "user down", block=True)]


@pytest.mark.parametrize("lost", [NodeState.PREEMPTED, NodeState.LOST])
@pytest.mark.parametrize("status", [J.STARTING, J.RUNNING])
def test_a_preempted_or_lost_node_recovers(lost: NodeState, status: JobStatus) -> None:
    attempt = make_attempt(C.RUNNING, nodes=(NodeState.READY, lost))
    actions = decide_job(snap(status, attempt))
    assert kinds(actions) == [EndAttempt, Recover]
    recover = actions[1]
    assert isinstance(recover, Recover)
    assert (recover.kind, recover.block) == ("preemption", True)
    assert recover.reason == attempt.lost_node


def test_a_lost_node_on_demand_does_not_block_the_zone() -> None:
    attempt = make_attempt(C.RUNNING, target=OD, nodes=(NodeState.LOST,))
    actions = decide_job(snap(J.RUNNING, attempt))
    assert isinstance(actions[-1], Recover) and not actions[-1].block


def test_lost_node_prefers_preempted_in_its_reason() -> None:
    attempt = make_attempt(nodes=(NodeState.LOST, NodeState.PREEMPTED))
    assert attempt.lost_node is not None and "preempted" in attempt.lost_node
    assert make_attempt(nodes=(NodeState.READY,)).lost_node is None


def test_an_attempt_row_that_disappeared_recovers_as_a_launch() -> None:
    actions = decide_job(snap(J.RUNNING, None))
    assert kinds(actions) == [Recover]
    assert isinstance(actions[0], Recover) and actions[0].kind == "launch"


# ---- cancel -----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [J.PENDING, J.STARTING, J.RUNNING, J.RECOVERING])
def test_a_cancel_moves_any_non_final_job_to_cancelling(status: JobStatus) -> None:
    actions = decide_job(snap(status, make_attempt(C.RUNNING), cancel_requested=True))
    assert actions == [SetJob(J.CANCELLING, "cancel requested"), EndAttempt("job cancelled")]


@pytest.mark.parametrize("attempt", [None, make_attempt(C.TERMINATING)], ids=["none", "going"])
def test_a_cancel_without_a_live_attempt_ends_nothing(attempt: AttemptView | None) -> None:
    actions = decide_job(snap(J.RUNNING, attempt, cancel_requested=True))
    assert actions == [SetJob(J.CANCELLING, "cancel requested")]


def test_a_cancel_wins_over_a_timeout_and_over_a_succeeded_attempt() -> None:
    old = NOW - 2 * 24 * 60 * MIN
    actions = decide_job(
        snap(J.STARTING, make_attempt(C.SUCCEEDED), cancel_requested=True, status_changed_at=old)
    )
    assert actions[0] == SetJob(J.CANCELLING, "cancel requested")
    assert not any(isinstance(a, Recover | StartAttempt) for a in actions)


def test_cancelling_ends_when_the_attempt_is_terminated_and_nothing_else_lives() -> None:
    actions = decide_job(snap(J.CANCELLING, make_attempt(C.TERMINATED), cancel_requested=True))
    assert kinds(actions) == [SetJob]
    assert isinstance(actions[0], SetJob) and actions[0].status is J.CANCELLED


def test_cancelling_without_any_attempt_is_cancelled() -> None:
    actions = decide_job(snap(J.CANCELLING, None, cancel_requested=True))
    assert isinstance(actions[0], SetJob) and actions[0].status is J.CANCELLED


def test_cancelling_waits_while_an_earlier_attempt_lives() -> None:
    s = snap(J.CANCELLING, make_attempt(C.TERMINATED), others_live=True, cancel_requested=True)
    assert decide_job(s) == []


def test_cancelling_waits_for_the_provider_to_confirm_the_teardown() -> None:
    assert decide_job(snap(J.CANCELLING, make_attempt(C.TERMINATING))) == []


@pytest.mark.parametrize("cluster", [C.RUNNING, C.FAILED, C.SUCCEEDED, C.PROVISIONING])
def test_cancelling_takes_a_live_attempt_down(cluster: ClusterStatus) -> None:
    assert decide_job(snap(J.CANCELLING, make_attempt(cluster))) == [EndAttempt("job cancelled")]


# ---- RECOVERING -------------------------------------------------------------------------------


def test_recovering_first_takes_the_old_attempt_down() -> None:
    actions = decide_job(snap(J.RECOVERING, make_attempt(C.FAILED)))
    assert actions == [EndAttempt("recovering")]


def test_recovering_waits_out_the_backoff() -> None:
    s = snap(J.RECOVERING, make_attempt(C.TERMINATING), next_attempt_at=NOW + 5.0)
    assert decide_job(s) == []


def test_recovering_starts_the_next_attempt_when_the_backoff_is_over() -> None:
    s = snap(J.RECOVERING, make_attempt(C.TERMINATED), next_attempt_at=NOW)
    assert decide_job(s) == [StartAttempt(None)]


def test_recovering_without_an_attempt_row_starts_one() -> None:
    assert decide_job(snap(J.RECOVERING, None)) == [StartAttempt(None)]


def test_recovering_waits_while_the_spot_policy_idles() -> None:
    assert decide_job(snap(J.RECOVERING, make_attempt(C.TERMINATED), wanted_mode="idle")) == []


@pytest.mark.parametrize("mode", ["spot", "on_demand"])
def test_recovering_starts_in_the_spot_policys_mode(mode: str) -> None:
    s = snap(J.RECOVERING, make_attempt(C.TERMINATING), wanted_mode=mode)
    assert decide_job(s) == [StartAttempt(mode)]


# ---- stops we asked for -----------------------------------------------------------------------


def test_a_budget_stop_fails_the_job_with_failure_budget() -> None:
    doc = make_doc(budget_usd=10.0)
    s = snap(J.RUNNING, make_attempt(C.FAILED, failure="task"), doc=doc, pending_stop="budget",
             cost_usd=9.5)  # fmt: skip
    actions = decide_job(s)
    assert kinds(actions) == [EndAttempt, SetJob]
    final = actions[1]
    assert isinstance(final, SetJob)
    assert (final.status, final.failure) == (J.FAILED, "budget")
    assert "$9.50 of $10.00" in final.reason


def test_a_budget_stop_whose_attempt_is_already_going_only_fails_the_job() -> None:
    doc = make_doc(budget_usd=10.0)
    s = snap(J.RUNNING, make_attempt(C.TERMINATED), doc=doc, pending_stop="budget")
    actions = decide_job(s)
    assert kinds(actions) == [SetJob]


def test_a_task_that_succeeds_during_a_stop_still_succeeds() -> None:
    s = snap(J.RUNNING, make_attempt(C.SUCCEEDED), pending_stop="budget")
    assert decide_job(s)[0] == SetJob(J.SUCCEEDED, "the task succeeded")


@pytest.mark.parametrize(("stop", "block"), [("migrate", False), ("price", True)])
def test_a_migrate_or_price_stop_recovers_with_its_kind(stop: str, block: bool) -> None:
    attempt = make_attempt(C.FAILED, failure="task", reason="exit 75")
    actions = decide_job(snap(J.RUNNING, attempt, pending_stop=stop))
    assert actions == [EndAttempt(stop), Recover(stop, f"{stop}: exit 75", block=block)]


def test_a_pending_stop_is_not_requested_again() -> None:
    doc = make_doc(budget_usd=0.01)
    s = snap(J.RUNNING, make_attempt(C.RUNNING), doc=doc, pending_stop="budget")
    assert decide_job(s) == []


# ---- checks while running ---------------------------------------------------------------------


def test_the_budget_guard_asks_the_task_to_stop_before_the_next_gap() -> None:
    # $9 spent + $10/h × 600 s = $10.67 > $10
    s = snap(J.RUNNING, make_attempt(target=OD), doc=make_doc(budget_usd=10.0), cost_usd=9.0)
    actions = decide_job(s)
    assert kinds(actions) == [RequestStop]
    assert isinstance(actions[0], RequestStop) and actions[0].why == "budget"


def test_the_budget_guard_keeps_going_while_the_next_gap_fits() -> None:
    # $8 + $10/h × 600 s = $9.67; $9 + $6/h × 600 s = exactly $10 (not passed)
    assert decide_job(snap(J.RUNNING, make_attempt(target=OD), doc=make_doc(budget_usd=10.0),
                           cost_usd=8.0)) == []  # fmt: skip
    six = dataclasses.replace(OD, price_per_hour=6.0)
    assert decide_job(snap(J.RUNNING, make_attempt(target=six), doc=make_doc(budget_usd=10.0),
                           cost_usd=9.0)) == []  # fmt: skip


def test_the_budget_guard_is_not_applied_while_starting() -> None:
    s = snap(J.STARTING, make_attempt(C.RUNNING), doc=make_doc(budget_usd=0.0), cost_usd=5.0)
    assert decide_job(s) == [SetJob(J.RUNNING, "the task runs on every node")]


def test_a_spot_price_above_the_limit_asks_the_task_to_stop() -> None:
    actions = decide_job(snap(J.RUNNING, make_attempt(), spot_price=5.0, spot_limit=4.0))
    assert kinds(actions) == [RequestStop]
    assert isinstance(actions[0], RequestStop) and actions[0].why == "price"


@pytest.mark.parametrize(
    ("price", "limit", "target"),
    [(4.0, 4.0, SPOT), (5.0, None, SPOT), (None, 4.0, SPOT), (5.0, 4.0, OD)],
    ids=["at-limit", "no-limit", "no-price", "on-demand"],
)
def test_the_price_check_needs_a_spot_attempt_above_a_known_limit(
    price: float | None, limit: float | None, target: LaunchTarget
) -> None:
    s = snap(J.RUNNING, make_attempt(target=target), spot_price=price, spot_limit=limit)
    assert decide_job(s) == []


def test_the_budget_check_comes_before_the_price_check() -> None:
    s = snap(J.RUNNING, make_attempt(), doc=make_doc(budget_usd=0.1), cost_usd=0.1,
             spot_price=5.0, spot_limit=4.0)  # fmt: skip
    actions = decide_job(s)
    assert isinstance(actions[0], RequestStop) and actions[0].why == "budget"


def test_on_demand_migrates_when_the_spot_policy_wants_spot() -> None:
    actions = decide_job(snap(J.RUNNING, make_attempt(target=OD), wanted_mode="spot"))
    assert kinds(actions) == [RequestStop]
    assert isinstance(actions[0], RequestStop) and actions[0].why == "migrate"


@pytest.mark.parametrize(
    ("target", "mode", "spot"),
    [(SPOT, "spot", (SPOT,)), (OD, "on_demand", (SPOT,)), (OD, "idle", (SPOT,)), (OD, "spot", ())],
    ids=["on-spot-already", "wants-on-demand", "wants-idle", "no-spot-targets"],
)
def test_no_migration_unless_on_demand_and_spot_is_wanted_and_possible(
    target: LaunchTarget, mode: str, spot: tuple[LaunchTarget, ...]
) -> None:
    s = snap(J.RUNNING, make_attempt(target=target), wanted_mode=mode, doc=make_doc(spot=spot))
    assert decide_job(s) == []


# ---- timeouts ---------------------------------------------------------------------------------


def test_starting_past_an_hour_recovers_as_a_launch() -> None:
    s = snap(J.STARTING, make_attempt(C.PROVISIONING), status_changed_at=NOW - 60 * MIN)
    actions = decide_job(s)
    assert kinds(actions) == [EndAttempt, Recover]
    assert isinstance(actions[1], Recover) and actions[1].kind == "launch"


def test_starting_just_under_an_hour_still_waits() -> None:
    s = snap(J.STARTING, make_attempt(C.PROVISIONING), status_changed_at=NOW - 60 * MIN + 1)
    assert decide_job(s) == []


def test_a_starting_job_past_its_timeout_whose_attempt_succeeded_succeeds() -> None:
    s = snap(J.STARTING, make_attempt(C.SUCCEEDED), status_changed_at=NOW - 61 * MIN)
    assert decide_job(s)[0] == SetJob(J.SUCCEEDED, "the task succeeded")


def test_a_starting_job_past_its_timeout_whose_attempt_runs_moves_to_running() -> None:
    s = snap(J.STARTING, make_attempt(C.RUNNING), status_changed_at=NOW - 61 * MIN)
    assert decide_job(s) == [SetJob(J.RUNNING, "the task runs on every node")]


def test_recovering_past_a_day_fails_with_failure_timeout() -> None:
    s = snap(J.RECOVERING, make_attempt(C.TERMINATED), status_changed_at=NOW - 24 * 60 * MIN)
    actions = decide_job(s)
    assert kinds(actions) == [SetJob]
    final = actions[0]
    assert isinstance(final, SetJob)
    assert (final.status, final.failure) == (J.FAILED, "timeout")


def test_pending_past_ten_minutes_fails() -> None:
    s = snap(J.PENDING, None, status_changed_at=NOW - 10 * MIN)
    actions = decide_job(s)
    assert isinstance(actions[-1], SetJob) and actions[-1].status is J.FAILED


def test_cancelling_past_half_an_hour_is_re_issued() -> None:
    s = snap(J.CANCELLING, make_attempt(C.FAILED), status_changed_at=NOW - 30 * MIN)
    actions = decide_job(s)
    assert kinds(actions) == [SetJob, EndAttempt]
    assert isinstance(actions[0], SetJob) and actions[0].status is J.CANCELLING


def test_cancelling_past_its_timeout_with_the_attempt_gone_is_cancelled() -> None:
    s = snap(J.CANCELLING, make_attempt(C.TERMINATED), status_changed_at=NOW - 30 * MIN)
    statuses = [a.status for a in decide_job(s) if isinstance(a, SetJob)]
    assert statuses == [J.CANCELLING, J.CANCELLED]


# ---- final jobs -------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [J.SUCCEEDED, J.FAILED, J.CANCELLED])
def test_a_final_job_takes_its_live_attempt_down(status: JobStatus) -> None:
    actions = decide_job(snap(status, make_attempt(C.RUNNING), cancel_requested=True))
    assert actions == [EndAttempt(f"job {status.value}")]


@pytest.mark.parametrize("attempt", [None, make_attempt(C.TERMINATING), make_attempt(C.TERMINATED)])
def test_a_final_job_without_a_live_attempt_does_nothing(attempt: AttemptView | None) -> None:
    long_ago = NOW - 10 * 24 * 60 * MIN
    assert decide_job(snap(J.FAILED, attempt, status_changed_at=long_ago)) == []


# ---- property: the actions respect the JobStatus table ------------------------------------------

_FINAL = {J.SUCCEEDED, J.FAILED, J.CANCELLED}


@st.composite
def snapshots(draw: st.DrawFn) -> JobSnapshot:
    status = draw(st.sampled_from(list(J)))
    target = draw(st.sampled_from([SPOT, OD]))
    attempt = draw(
        st.none()
        | st.builds(
            make_attempt,
            st.sampled_from(list(C)),
            failure=st.sampled_from([None, "infra", "task", "launch"]),
            target=st.just(target),
            nodes=st.lists(st.sampled_from(list(NodeState)), max_size=3).map(tuple),
            reason=st.sampled_from(["", "why"]),
        )
    )
    budget = draw(st.none() | st.floats(0.0, 100.0))
    doc = make_doc(
        spot=draw(st.sampled_from([(), (SPOT,)])),
        on_demand=draw(st.sampled_from([(), (OD,)])),
        max_restarts_on_errors=draw(st.integers(0, 3)),
        budget_usd=budget,
    )
    # a budget stop is only ever requested when the job has a budget
    stops = [None, "migrate", "price"] if budget is None else [None, "budget", "migrate", "price"]
    age = draw(st.sampled_from([0.0, 9 * MIN, 31 * MIN, 61 * MIN, 25 * 60 * MIN]))
    return snap(
        status,
        attempt,
        now=NOW,
        others_live=draw(st.booleans()),
        wanted_mode=draw(st.sampled_from([None, "spot", "on_demand", "idle"])),
        spot_price=draw(st.none() | st.floats(0.0, 20.0)),
        spot_limit=draw(st.none() | st.floats(0.0, 20.0)),
        doc=doc,
        status_changed_at=NOW - age,
        restarts=draw(st.integers(0, 3)),
        cost_usd=draw(st.floats(0.0, 100.0)),
        next_attempt_at=draw(st.none() | st.sampled_from([NOW - 1.0, NOW, NOW + 1.0])),
        cancel_requested=draw(st.booleans()),
        pending_stop=draw(st.sampled_from(stops)),
    )


@settings(max_examples=400, deadline=None)
@given(snapshots())
def test_every_action_follows_the_job_status_table(s: JobSnapshot) -> None:
    actions = decide_job(s)
    current = s.job.status
    for action in actions:
        if isinstance(action, SetJob):
            assert allowed(current, action.status), (current, action)
            current = action.status
        elif isinstance(action, Recover):
            assert allowed(current, J.RECOVERING), (current, action)
            current = J.RECOVERING
        elif isinstance(action, StartAttempt):
            assert current in (J.PENDING, J.RECOVERING)
            assert allowed(current, J.STARTING) and allowed(current, J.FAILED)
        elif isinstance(action, RequestStop):
            assert current is J.RUNNING and s.job.pending_stop is None
        else:
            assert isinstance(action, EndAttempt)
            # only a live attempt is taken down
            assert s.attempt is not None
            assert s.attempt.status not in (C.TERMINATING, C.TERMINATED)
    if s.job.status in _FINAL:
        assert all(isinstance(a, EndAttempt) for a in actions)
    if s.job.cancel_requested and s.job.status not in _FINAL:
        assert not any(isinstance(a, StartAttempt | Recover | RequestStop) for a in actions)
        moves = [a.status for a in actions if isinstance(a, SetJob)]
        if s.job.status is J.CANCELLING:
            assert set(moves) <= {J.CANCELLING, J.CANCELLED}
        else:
            assert moves == [J.CANCELLING]
    assert sum(isinstance(a, EndAttempt) for a in actions) <= 1


# ---- job loop helpers -------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120), st.integers(1, 10**12), st.integers(1, 10**6))
def test_attempt_name_is_a_valid_cluster_name_for_any_job_name(
    name: str, job_id: int, attempt: int
) -> None:
    result = attempt_name(name, job_id, attempt)
    assert len(result) <= 63
    assert CLUSTER_NAME.match(result), result
    assert result.endswith(f"-{job_id}-{attempt}")


def test_attempt_name_keeps_a_valid_name_and_falls_back_to_job() -> None:
    assert attempt_name("train.v2", 3, 1) == "train.v2-3-1"
    assert attempt_name("///", 3, 2) == "job-3-2"
    long = attempt_name("a" * 100, 12, 34)
    assert long == "a" * (63 - len("-12-34")) + "-12-34"


@settings(max_examples=300, deadline=None)
@given(st.from_regex(CLUSTER_NAME, fullmatch=True), st.integers(1, 10**12))
def test_job_task_id_matches_the_agent_task_id_pattern(name: str, job_id: int) -> None:
    # job names are checked as cluster names at launch (server.service.check_name)
    task_id = job_task_id(name, job_id)
    assert re.match(TASK_ID_PATTERN, task_id), task_id
    assert task_id.endswith(f"-{job_id}")
    assert job_task_id(name, job_id) == task_id  # stable: every attempt shares it


# ---- JobReconciler.step on a real SQLite DB -----------------------------------------------------


@pytest.fixture
def jobs(
    engine: Engine, provider: FakeProvider, agents: FakeAgents, clock: VirtualClock
) -> JobReconciler:
    return JobReconciler(
        engine, {provider.name: provider}, agents, clock=clock, owner=OWNER,
        config=JobConfig(backoff_base_s=10.0, backoff_cap_s=10.0),
    )  # fmt: skip


def new_job(engine: Engine, clock: VirtualClock, doc: JobDocument, name: str = "train") -> int:
    with session_scope(engine) as session:
        job = create_job(session, name=name, task={}, owner=OWNER, actor="test", now=clock.now())
        task_id = job_task_id(name, job.id)
        job.task = dataclasses.replace(doc, task_id=task_id).to_json()
        return job.id


def job_row(engine: Engine, job_id: int) -> Job:
    with session_scope(engine) as session:
        row = session.get(Job, job_id)
        assert row is not None
        session.expunge(row)
        return row


def cluster_of(engine: Engine, cluster_id: int | None) -> Cluster:
    assert cluster_id is not None
    with session_scope(engine) as session:
        row = session.get(Cluster, cluster_id)
        assert row is not None
        session.expunge(row)
        return row


def move_cluster(
    engine: Engine, clock: VirtualClock, cluster_id: int | None, *path: ClusterStatus,
    failure: str | None = None,
) -> None:  # fmt: skip
    assert cluster_id is not None
    with session_scope(engine) as session:
        cluster = session.get(Cluster, cluster_id)
        assert cluster is not None
        for status in path:
            assert set_status(session, cluster, status, actor="test", reason=f"to {status}",
                              now=clock.now())  # fmt: skip
        if failure is not None:
            cluster.failure = failure


def ready_node(engine: Engine, clock: VirtualClock, cluster_id: int | None) -> str:
    with session_scope(engine) as session:
        cluster = session.get(Cluster, cluster_id)
        assert cluster is not None
        node = ensure_node(session, cluster, instance_id="i-0", node_rank=0, actor="test",
                           now=clock.now(), agent_url="http://agent/i-0")  # fmt: skip
        assert set_status(session, node, NodeState.READY, actor="test", reason="up",
                          now=clock.now())  # fmt: skip
    return "i-0"


UP = (C.PROVISIONING, C.SETTING_UP, C.RUNNING)


def test_step_starts_an_attempt_cluster_for_a_pending_job(
    engine: Engine, jobs: JobReconciler, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock, make_doc(spot=()))
    assert jobs.due() == [jid]
    assert jobs.step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.attempt, row.pricing) == (J.STARTING, 1, "on_demand")
    cluster = cluster_of(engine, row.cluster_id)
    assert cluster.name == attempt_name("train", jid, 1)
    assert (cluster.job_id, cluster.status, cluster.pricing) == (jid, C.PENDING, "on_demand")
    assert row.events[-1]["kind"] == "attempt"
    assert not jobs.step(jid)  # the attempt is coming up: nothing to do
    assert job_row(engine, jid).attempt == 1

    move_cluster(engine, clock, row.cluster_id, *UP)
    assert jobs.step(jid)
    assert job_row(engine, jid).status is J.RUNNING
    with session_scope(engine) as session:
        job = session.get(Job, jid)
        assert job is not None
        moves = [(h.from_status, h.to_status) for h in history(session, job)]
    assert moves == [(None, "pending"), ("pending", "starting"), ("starting", "running")]


def test_step_cancels_only_once_the_provider_confirms_the_attempt_gone(
    engine: Engine, jobs: JobReconciler, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock, make_doc(spot=()))
    jobs.step(jid)
    cid = job_row(engine, jid).cluster_id
    move_cluster(engine, clock, cid, *UP)
    jobs.step(jid)
    with session_scope(engine) as session:
        job = session.get(Job, jid)
        assert job is not None
        job.cancel_requested = True
    assert jobs.step(jid)
    assert job_row(engine, jid).status is J.CANCELLING
    assert cluster_of(engine, cid).status is C.TERMINATING
    assert not jobs.step(jid)
    assert job_row(engine, jid).status is J.CANCELLING
    move_cluster(engine, clock, cid, C.TERMINATED)
    assert jobs.step(jid)
    assert job_row(engine, jid).status is J.CANCELLED
    assert jobs.due() == []


def test_step_asks_for_a_checkpoint_then_fails_the_job_on_budget(
    engine: Engine, jobs: JobReconciler, agents: FakeAgents, clock: VirtualClock
) -> None:
    # $10/h × 600 s ($1.67) would pass a $1 budget from the first check on
    jid = new_job(engine, clock, make_doc(spot=(), budget_usd=1.0))
    jobs.step(jid)
    row = job_row(engine, jid)
    move_cluster(engine, clock, row.cluster_id, *UP)
    instance = ready_node(engine, clock, row.cluster_id)
    jobs.step(jid)  # STARTING → RUNNING
    assert jobs.step(jid)  # RUNNING: the budget guard
    row = job_row(engine, jid)
    assert row.pending_stop == "budget"
    assert agents[instance].preempts == [(job_task_id("train", jid), 60.0)]
    assert row.events[-1]["kind"] == "stop:budget"
    jobs.step(jid)
    assert len(agents[instance].preempts) == 1  # asked once

    move_cluster(engine, clock, row.cluster_id, C.FAILED, failure="task")
    assert jobs.step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.failure, row.pending_stop) == (J.FAILED, "budget", None)
    assert cluster_of(engine, row.cluster_id).status is C.TERMINATING


def test_step_recovers_a_preempted_spot_attempt_in_another_zone(
    engine: Engine, jobs: JobReconciler, clock: VirtualClock
) -> None:
    z2 = dataclasses.replace(SPOT, zone="z2")
    jid = new_job(engine, clock, make_doc(spot=(SPOT, z2), on_demand=(), use_spot="true"))
    jobs.step(jid)
    first = job_row(engine, jid)
    assert (first.pricing, cluster_of(engine, first.cluster_id).zone) == ("spot", "z1")
    move_cluster(engine, clock, first.cluster_id, *UP)
    jobs.step(jid)
    move_cluster(engine, clock, first.cluster_id, C.FAILED, failure="infra")

    assert jobs.step(jid)
    row = job_row(engine, jid)
    assert (row.status, row.recoveries, row.restarts) == (J.RECOVERING, 1, 0)
    assert [(b["zone"], b["until"]) for b in row.blocked] == [("z1", clock.now() + 1800.0)]
    assert row.next_attempt_at == clock.now()  # a preemption does not back off
    assert cluster_of(engine, first.cluster_id).status is C.TERMINATING

    assert jobs.step(jid)  # the old attempt is going: the next one starts
    row = job_row(engine, jid)
    assert (row.status, row.attempt) == (J.STARTING, 2)
    second = cluster_of(engine, row.cluster_id)
    assert (second.name, second.zone) == (attempt_name("train", jid, 2), "z2")
    with session_scope(engine) as session:
        assert [c.id for c in job_clusters(session, jid)] == [first.cluster_id, second.id]


def test_step_backs_off_after_a_launch_failure(
    engine: Engine, jobs: JobReconciler, clock: VirtualClock
) -> None:
    jid = new_job(engine, clock, make_doc(spot=()))
    jobs.step(jid)
    cid = job_row(engine, jid).cluster_id
    move_cluster(engine, clock, cid, C.FAILED, failure="launch")
    assert jobs.step(jid)
    row = job_row(engine, jid)
    assert row.status is J.RECOVERING and row.recoveries == 0 and row.restarts == 0
    assert row.next_attempt_at is not None
    assert clock.now() <= row.next_attempt_at <= clock.now() + 10.0
    if row.next_attempt_at > clock.now():
        assert not jobs.step(jid)
        assert job_row(engine, jid).attempt == 1
    clock.advance(10.0)
    assert jobs.step(jid)
    assert (job_row(engine, jid).status, job_row(engine, jid).attempt) == (J.STARTING, 2)
