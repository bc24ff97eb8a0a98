"""The transition tables and timeouts themselves (no database): complete, consistent, and shaped
as docs/state.md says."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.errors import Permanent
from gpulease.state import (
    FINAL,
    INITIAL,
    TRANSIENT_TIMEOUTS,
    TRANSITIONS,
    ClusterStatus,
    IntentStatus,
    InvalidTransition,
    NodeState,
)
from gpulease.state.machines import allowed, check_transition, timeout_exit

C, N, I = ClusterStatus, NodeState, IntentStatus  # noqa: E741
ENUMS = [ClusterStatus, NodeState, IntentStatus]
RESTING = {
    ClusterStatus: {C.RUNNING, C.SUCCEEDED, C.FAILED, C.STOPPED, C.TERMINATED},
    NodeState: {N.READY, N.STOPPED, N.FAILED, N.TERMINATED},
    IntentStatus: {I.DONE, I.FAILED},
}
SELF_LOOPS = {C.PROVISIONING, C.TERMINATING, N.TERMINATING}

ALLOWED_EXAMPLES = [
    (C.PENDING, C.PROVISIONING),
    (C.PROVISIONING, C.SETTING_UP),
    (C.PROVISIONING, C.PROVISIONING),  # failover
    (C.SETTING_UP, C.RUNNING),
    (C.RUNNING, C.SUCCEEDED),
    (C.RUNNING, C.FAILED),
    (C.RUNNING, C.STOPPING),
    (C.STOPPING, C.STOPPED),
    (C.STOPPED, C.STARTING),
    (C.STARTING, C.SETTING_UP),
    (C.STARTING, C.RUNNING),
    (C.FAILED, C.TERMINATING),
    (C.SUCCEEDED, C.SETTING_UP),  # an idle pool node takes a managed job's task
    (C.FAILED, C.SUCCEEDED),  # a healthy pool node given back idle after its job failed
    (C.TERMINATING, C.TERMINATED),
    (N.PROVISIONING, N.SETTING_UP),
    (N.READY, N.LOST),
    (N.LOST, N.READY),
    (N.PREEMPTED, N.TERMINATED),
    (I.PENDING, I.SUBMITTED),
    (I.SUBMITTED, I.DONE),
    (I.SUBMITTED, I.FAILED),
    (I.PENDING, I.FAILED),
]
FORBIDDEN_EXAMPLES = [
    (C.TERMINATED, C.RUNNING),
    (C.TERMINATED, C.TERMINATING),
    (C.PENDING, C.RUNNING),
    (C.STOPPED, C.RUNNING),
    (C.SUCCEEDED, C.RUNNING),
    (C.RUNNING, C.TERMINATED),  # never terminated without the provider confirming
    (C.RUNNING, C.RUNNING),
    (N.READY, N.TERMINATED),
    (N.TERMINATED, N.READY),
    (I.DONE, I.FAILED),
    (I.FAILED, I.PENDING),
    (I.SUBMITTED, I.PENDING),
]


@pytest.mark.parametrize("enum_cls", ENUMS, ids=lambda e: e.__name__)
def test_every_status_has_a_row_and_values_are_lowercase(enum_cls: type) -> None:
    table = TRANSITIONS[enum_cls]
    assert set(table) == set(enum_cls)
    for status, targets in table.items():
        assert status.value == status.value.lower()
        assert all(isinstance(t, enum_cls) for t in targets)


@pytest.mark.parametrize("enum_cls", ENUMS, ids=lambda e: e.__name__)
def test_every_transient_status_has_a_timeout_whose_exit_is_allowed(enum_cls: type) -> None:
    timeouts = TRANSIENT_TIMEOUTS[enum_cls]
    assert set(timeouts) == set(enum_cls) - RESTING[enum_cls]
    for status, rule in timeouts.items():
        assert rule.seconds > 0 and rule.why
        assert allowed(status, rule.exit), f"{status} times out to {rule.exit}, not in the table"


@pytest.mark.parametrize("enum_cls", ENUMS, ids=lambda e: e.__name__)
def test_final_statuses_have_no_exit_and_others_have_one(enum_cls: type) -> None:
    for status, targets in TRANSITIONS[enum_cls].items():
        assert (not targets) == (status in FINAL), status


@pytest.mark.parametrize("enum_cls", [ClusterStatus, NodeState], ids=lambda e: e.__name__)
def test_any_non_final_status_can_be_torn_down(enum_cls: type) -> None:
    terminating = enum_cls("terminating")
    for status, targets in TRANSITIONS[enum_cls].items():
        if status not in FINAL:
            assert terminating in targets, status


@pytest.mark.parametrize("enum_cls", [ClusterStatus, NodeState], ids=lambda e: e.__name__)
def test_terminated_only_after_the_provider_confirms(enum_cls: type) -> None:
    terminated = enum_cls("terminated")
    sources = {s for s, targets in TRANSITIONS[enum_cls].items() if terminated in targets}
    assert sources <= {enum_cls("terminating"), NodeState.PREEMPTED}


def test_self_loops_are_only_failover_and_terminate_retries() -> None:
    loops = {s for e in ENUMS for s, targets in TRANSITIONS[e].items() if s in targets}
    assert loops == SELF_LOOPS


def _reachable(start: object, enum_cls: type) -> set[object]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in TRANSITIONS[enum_cls][todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("enum_cls", ENUMS, ids=lambda e: e.__name__)
def test_every_status_is_reachable_and_every_status_can_end(enum_cls: type) -> None:
    assert _reachable(INITIAL[enum_cls], enum_cls) == set(enum_cls)
    finals = {s for s in enum_cls if s in FINAL}
    for status in enum_cls:
        assert _reachable(status, enum_cls) & finals, f"{status} can never end"


@pytest.mark.parametrize(("current", "new"), ALLOWED_EXAMPLES, ids=str)
def test_allowed_transitions(current: object, new: object) -> None:
    check_transition(current, new, "x")


@pytest.mark.parametrize(("current", "new"), FORBIDDEN_EXAMPLES, ids=str)
def test_forbidden_transitions_raise_a_permanent_error(current: object, new: object) -> None:
    with pytest.raises(InvalidTransition, match="not an allowed transition") as info:
        check_transition(current, new, "x")
    assert isinstance(info.value, Permanent)


def test_statuses_of_different_machines_never_mix() -> None:
    assert C.PENDING != I.PENDING and C.FAILED not in {I.FAILED}
    assert str(C.PENDING) == "pending"
    assert not allowed(C.PENDING, I.SUBMITTED)
    assert not allowed(I.PENDING, C.PROVISIONING)


def test_timeout_exit_boundaries() -> None:
    rule = TRANSIENT_TIMEOUTS[ClusterStatus][C.SETTING_UP]
    assert timeout_exit(C.SETTING_UP, 100.0, 100.0 + rule.seconds - 0.001) is None
    assert timeout_exit(C.SETTING_UP, 100.0, 100.0 + rule.seconds) is C.FAILED
    assert timeout_exit(C.RUNNING, 0.0, 1e12) is None
    assert timeout_exit(C.TERMINATING, 0.0, 1e12) is C.TERMINATING  # retried, never assumed gone
    assert timeout_exit(N.LOST, 0.0, 1e12) is N.TERMINATING


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ENUMS), st.lists(st.integers(min_value=0, max_value=1000), max_size=40))
def test_random_walks_follow_the_table_and_stop_only_when_final(
    enum_cls: type, choices: list[int]
) -> None:
    status = INITIAL[enum_cls]
    members = list(enum_cls)
    for choice in choices:
        targets = sorted(TRANSITIONS[enum_cls][status], key=str)
        if not targets:
            assert status in FINAL
            break
        forbidden = [m for m in members if m not in targets]
        if forbidden:
            with pytest.raises(InvalidTransition):
                check_transition(status, forbidden[choice % len(forbidden)], "x")
        new = targets[choice % len(targets)]
        check_transition(status, new, "x")
        status = new
