"""The task state machine and the submission rules, without processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gpulease.agent.state import (
    TRANSITIONS,
    InvalidTransition,
    TaskRecord,
    TaskState,
    load_record,
    save_record,
    set_state,
)
from gpulease.wire import NodeTask


def test_every_state_has_a_row_and_terminal_states_have_no_exit() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    for state, targets in TRANSITIONS.items():
        assert (not targets) == state.terminal


def test_set_state_enforces_the_table_and_keeps_history() -> None:
    record = TaskRecord(NodeTask(task_id="t", run="true"))
    set_state(record, TaskState.RUNNING, 10.0)
    set_state(record, TaskState.SUCCEEDED, 12.0, "done")
    assert record.history == [("RUNNING", 10.0), ("SUCCEEDED", 12.0)]
    assert (record.started_at, record.finished_at, record.detail) == (10.0, 12.0, "done")
    with pytest.raises(InvalidTransition):
        set_state(record, TaskState.RUNNING, 13.0)


def test_a_record_round_trips_through_its_file(tmp_path: Path) -> None:
    record = TaskRecord(NodeTask(task_id="t", run="true", envs={"A": "1"}), pgid=42)
    set_state(record, TaskState.SETTING_UP, 1.0)
    save_record(tmp_path / "task.json", record)
    assert load_record(tmp_path / "task.json") == record
    assert "envs" not in str(record.status())  # the public view leaves envs out


@pytest.mark.parametrize(
    "body",
    [
        {"task_id": "../etc", "run": "x"},
        {"task_id": "t", "run": "x", "node_rank": 2, "num_nodes": 2, "node_ips": ["a", "b"]},
        {"task_id": "t", "run": "x", "num_nodes": 2},  # one node ip for two nodes
        {"task_id": "t", "run": "x", "envs": {"BAD-NAME": "1"}},
        {"task_id": "t", "run": "x", "file_mounts": {"../outside": "/tmp"}},
        {"task_id": "t", "run": "x", "surprise": 1},
    ],
)
def test_invalid_submissions_are_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        NodeTask.model_validate(body)


def test_the_master_port_is_the_same_on_every_node_without_being_given() -> None:
    a = NodeTask(task_id="job", run="x", node_rank=0, num_nodes=2, node_ips=["a", "b"])
    b = NodeTask(task_id="job", run="x", node_rank=1, num_nodes=2, node_ips=["a", "b"])
    assert a.effective_master_port() == b.effective_master_port()
    assert 29500 <= a.effective_master_port() < 32768  # below the ephemeral port range
