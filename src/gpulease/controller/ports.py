"""What the controller needs from the world besides the DB and the providers: the agents.

The controller may not import :mod:`gpulease.agent` (layering), so it names what it needs as
protocols and plain data; the server implements them over the agent's HTTP client, tests with
doubles. Owns :class:`NodeRef`, :class:`AgentReport`, :class:`Liveness`, :class:`AgentPort` and
:class:`AgentConnector`; what crosses to the agent (:class:`~gpulease.wire.NodeTask`, task states,
log chunks, exec results) is the shared vocabulary of :mod:`gpulease.wire`. Moves no states.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState


class Liveness(enum.Enum):
    """DESIGN 7: UNKNOWN (no answer this time) counts as alive until N polls in a row miss;
    DEAD only when the provider confirms the instance gone."""

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class NodeRef:
    """How to reach one node's agent."""

    provider: str
    instance_id: str
    agent_url: str


@dataclass(frozen=True, slots=True)
class AgentReport:
    """One poll of a node's agent: whether it answered and the state of our task on it
    (``task_state`` None: the node has no such task yet). For a task that ended: its exit code,
    and for one that ended badly the step that failed (``setup``, ``run``, ``file sync``,
    ``task environment``, ``checkpoint restore``; None when unknown), the signal that killed it
    and the agent's one-line ``detail`` ("setup exited 2")."""

    liveness: Liveness
    task_state: TaskState | None = None
    exit_code: int | None = None
    step: str | None = None
    signal: str | None = None
    detail: str | None = None


class AgentPort(Protocol):
    """One node's agent. ``poll`` never raises (an agent that does not answer is UNKNOWN); the
    other calls raise a ``Retryable`` when it does not answer and a ``Permanent`` error when it
    refuses."""

    def poll(self, task_id: str) -> AgentReport: ...

    def submit(self, task: NodeTask) -> None: ...

    def cancel(self, task_id: str) -> None: ...

    def preempt(self, task_id: str, grace_s: float) -> None:
        """Deliver a preemption notice: the agent touches the preemption file and SIGTERMs the
        job, which checkpoints and exits 75."""
        ...

    def logs(self, task_id: str, offset: int, limit: int | None = None) -> LogChunk: ...

    def exec(self, task_id: str, command: str, timeout_s: float) -> ExecResult: ...


class AgentConnector(Protocol):
    """Hands out agents; owns their tokens (the DB keeps only the hashes)."""

    def agent(self, node: NodeRef) -> AgentPort: ...

    def token_hash(self, provider: str, instance_id: str) -> str | None:
        """The sha256 of the node's agent token (stored on the node row), None if unknown."""
        ...

    def forget(self, node: NodeRef) -> None:
        """Drop cached connections to a node that is gone."""
        ...
