"""Whether a pool node is fit to go back to its pool, from what its agents answer
(:func:`~gpulease.controller.pool_return.settle`): clean only when no node runs the job's task
and its checkpoint dir was emptied; a task still running is cancelled first; an agent that does
not answer this time is asked again; a dead one, or a clean-up that fails, tears the node down."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpulease.controller.pool_return import CLEAN_CHECKPOINTS, Handback, Outcome, settle
from gpulease.controller.ports import AgentReport, Liveness, NodeRef
from gpulease.errors import Permanent, Retryable
from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState

TASK = "job-train-7"


@dataclass
class Agents:
    """One agent per instance: what it answers about the task, and what it was asked."""

    reports: dict[str, AgentReport]
    exec_result: ExecResult | Exception = field(default_factory=lambda: ExecResult(0, "", False))
    cancel_error: Exception | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (instance, call)

    def agent(self, node: NodeRef) -> _Agent:
        return _Agent(self, node.instance_id)

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        return None

    def forget(self, node: NodeRef) -> None:
        pass


@dataclass
class _Agent:
    agents: Agents
    instance: str

    def poll(self, task_id: str) -> AgentReport:
        assert task_id == TASK
        return self.agents.reports[self.instance]

    def submit(self, task: NodeTask) -> None:
        raise AssertionError("a give-back submits nothing")

    def cancel(self, task_id: str) -> None:
        self.agents.calls.append((self.instance, "cancel"))
        if self.agents.cancel_error is not None:
            raise self.agents.cancel_error

    def preempt(self, task_id: str, grace_s: float) -> None:
        raise AssertionError("a give-back sends no notice")

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk:
        raise AssertionError("no logs read")

    def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult:
        assert (task_id, command) == (TASK, CLEAN_CHECKPOINTS)
        self.agents.calls.append((self.instance, "clean"))
        if isinstance(self.agents.exec_result, Exception):
            raise self.agents.exec_result
        return self.agents.exec_result


def _report(state: TaskState | None, liveness: Liveness = Liveness.ALIVE) -> AgentReport:
    return AgentReport(liveness, state)


def _handback(*, stop_first: bool = False) -> Handback:
    refs = (NodeRef("sim", "i-0", "http://a0"), NodeRef("sim", "i-1", "http://a1"))
    return Handback(1, TASK, refs, stop_first=stop_first)


def test_a_node_whose_task_ended_everywhere_is_cleaned_then_clean() -> None:
    agents = Agents({"i-0": _report(TaskState.FAILED), "i-1": _report(TaskState.CANCELLED)})
    assert settle(agents, _handback()) is Outcome.CLEAN
    assert agents.calls == [("i-0", "clean"), ("i-1", "clean")]


def test_a_peer_still_running_the_task_or_not_answering_is_asked_again() -> None:
    running = Agents({"i-0": _report(TaskState.FAILED), "i-1": _report(TaskState.RUNNING)})
    assert settle(running, _handback()) is Outcome.BUSY
    silent = Agents({"i-0": _report(None), "i-1": _report(None, Liveness.UNKNOWN)})
    assert settle(silent, _handback()) is Outcome.BUSY
    assert running.calls == silent.calls == []  # nothing cleaned while a task may run


def test_a_dead_node_or_a_failed_clean_up_tears_the_node_down() -> None:
    dead = Agents({"i-0": _report(TaskState.FAILED), "i-1": _report(None, Liveness.DEAD)})
    assert settle(dead, _handback()) is Outcome.UNFIT
    refused = Agents({"i-0": _report(None), "i-1": _report(None)},
                     exec_result=ExecResult(1, "rm: denied", False))  # fmt: skip
    assert settle(refused, _handback()) is Outcome.UNFIT
    gone = Agents({"i-0": _report(None), "i-1": _report(None)},
                  exec_result=Permanent("no such task"))  # fmt: skip
    assert settle(gone, _handback()) is Outcome.UNFIT
    away = Agents({"i-0": _report(None), "i-1": _report(None)},
                  exec_result=Retryable("connection refused"))  # fmt: skip
    assert settle(away, _handback()) is Outcome.BUSY


@pytest.mark.parametrize("error", [None, Retryable("connection refused")])
def test_a_task_still_running_is_cancelled_first(error: Exception | None) -> None:
    agents = Agents({"i-0": _report(TaskState.RUNNING), "i-1": _report(TaskState.SETTING_UP)},
                    cancel_error=error)  # fmt: skip
    outcome = settle(agents, _handback(stop_first=True))
    assert agents.calls == [("i-0", "cancel"), ("i-1", "cancel")]  # never cleaned meanwhile
    assert outcome is (Outcome.STOPPING if error is None else Outcome.BUSY)


def test_a_task_not_submitted_yet_is_waited_for() -> None:
    agents = Agents({"i-0": _report(None), "i-1": _report(None)})
    assert settle(agents, _handback(stop_first=True)) is Outcome.BUSY
    assert agents.calls == []
