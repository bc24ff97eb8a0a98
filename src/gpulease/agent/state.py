"""Task state on a node: the state machine, the record, and its atomic JSON file.

States and the only transitions :func:`set_state` allows::

    PENDING ─▶ SETTING_UP ─▶ RUNNING ─▶ SUCCEEDED
       │            │            ├────▶ FAILED      (non-zero exit; setup failures too)
       │            │            ├────▶ PREEMPTED   (exit 75, or a preemption notice)
       └────────────┴────────────┴────▶ CANCELLED   (a cancel request)

PENDING and SETTING_UP may also end FAILED or PREEMPTED directly. Every change is appended to
``history`` with its time; ``checkpoint`` holds the checkpoint sync status when the task has a
checkpoint store. The record is written to ``tasks/<task_id>/task.json`` (atomically,
0600) after every change, so a restarted agent reports — and resumes — what it left.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpulease.atomic import write_json_atomic
from gpulease.wire import PREEMPTED_EXIT_CODE, NodeTask, TaskState

__all__ = ["PREEMPTED_EXIT_CODE", "TRANSITIONS", "InvalidTransition", "TaskRecord", "TaskState",
           "load_record", "save_record", "set_state", "write_json_atomic"]  # fmt: skip

_ENDINGS = {TaskState.FAILED, TaskState.PREEMPTED, TaskState.CANCELLED}

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.PENDING: frozenset({TaskState.SETTING_UP, TaskState.RUNNING, *_ENDINGS}),
    TaskState.SETTING_UP: frozenset({TaskState.RUNNING, *_ENDINGS}),
    TaskState.RUNNING: frozenset({TaskState.SUCCEEDED, *_ENDINGS}),
    TaskState.SUCCEEDED: frozenset(),
    TaskState.FAILED: frozenset(),
    TaskState.PREEMPTED: frozenset(),
    TaskState.CANCELLED: frozenset(),
}


class InvalidTransition(RuntimeError):
    """A state change the table forbids (a bug in the agent, never the user's doing)."""


@dataclass
class TaskRecord:
    """What the agent knows about one task (the latest attempt)."""

    submission: NodeTask
    state: TaskState = TaskState.PENDING
    phase: str | None = None  # "setup" | "run" while a process runs or was last run
    pgid: int | None = None  # the running phase's process group
    exit_code: int | None = None
    signal: str | None = None  # the signal that ended the job, if one did
    detail: str = ""
    stop: str | None = None  # "preempt" | "cancel" once requested
    stop_grace_s: float = 0.0
    submitted_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    phases_done: list[str] = field(default_factory=list)
    history: list[tuple[str, float]] = field(default_factory=list)
    checkpoint: dict[str, Any] | None = None  # checkpoint sync status (ckpt_sync.SyncStatus)

    @property
    def task_id(self) -> str:
        return self.submission.task_id

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["submission"] = self.submission.model_dump(mode="json")
        data["state"] = self.state.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskRecord:
        data = dict(data)
        data["submission"] = NodeTask.model_validate(data["submission"])
        data["state"] = TaskState(data["state"])
        data["history"] = [(str(s), float(t)) for s, t in data.get("history", [])]
        return cls(**data)

    def status(self) -> dict[str, Any]:
        """The public view: everything but the submission's scripts and envs (may hold
        secrets)."""
        return {
            "task_id": self.task_id,
            "attempt": self.submission.attempt,
            "state": self.state.value,
            "phase": self.phase,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "detail": self.detail,
            "stop_requested": self.stop,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "history": [{"state": s, "at": t} for s, t in self.history],
            "checkpoint": None if self.checkpoint is None else dict(self.checkpoint),
        }


def set_state(record: TaskRecord, new: TaskState, at: float, detail: str | None = None) -> None:
    """Move ``record`` to ``new`` if the table allows it; stamp the time and the history."""
    if new not in TRANSITIONS[record.state]:
        raise InvalidTransition(f"{record.task_id}: {record.state} -> {new} is not allowed")
    record.state = new
    record.history.append((new.value, at))
    if new in (TaskState.SETTING_UP, TaskState.RUNNING) and record.started_at is None:
        record.started_at = at
    if new.terminal:
        record.finished_at = at
    if detail is not None:
        record.detail = detail


def save_record(path: Path, record: TaskRecord) -> None:
    """Write the record (0600: its scripts and envs may hold secrets), atomically."""
    write_json_atomic(path, record.to_json(), indent=1, mode=0o600)


def load_record(path: Path) -> TaskRecord:
    return TaskRecord.from_json(json.loads(path.read_text(encoding="utf-8")))
