"""The steps a reconcile pass may take, as data: :func:`~gpulease.controller.decide.decide`
returns a list of them, :mod:`gpulease.controller.apply` carries them out in order. Each is
idempotent (repeating it after a crash changes nothing more). Moves no states itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from gpulease.state import ClusterStatus, IntentStatus, LaunchTarget, NodeState
from gpulease.wire import NodeTask


@dataclass(frozen=True, slots=True)
class Launch:
    """Send the open intent's launch (``submit_intent`` + ``provider.launch``), record the nodes
    it returned and move the cluster to PROVISIONING."""

    request_id: str


@dataclass(frozen=True, slots=True)
class FailOver:
    """Give up the current target for ``target`` (``gpulease.state.fail_over``)."""

    target: LaunchTarget
    error: str


@dataclass(frozen=True, slots=True)
class SetCluster:
    """Move the cluster to ``status``. A move to FAILED says why in ``failure``: ``infra`` (a
    node was preempted or lost — the managed-jobs loop recovers such a job elsewhere), ``task``
    (the user's setup or run failed), ``launch`` (no offer could be started); with ``task``,
    ``task_failure`` says where: ``{rank, state, step, exit_code, signal, detail}`` of the first
    node whose task ended badly (see :class:`~gpulease.controller.ports.AgentReport`)."""

    status: ClusterStatus
    reason: str
    failure: str | None = None
    task_failure: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class SetNode:
    node_id: int
    state: NodeState
    reason: str


@dataclass(frozen=True, slots=True)
class SetIntent:
    request_id: str
    status: IntentStatus
    reason: str


@dataclass(frozen=True, slots=True)
class Terminate:
    provider: str
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stop:
    provider: str
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Start:
    provider: str
    instance_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubmitTask:
    node_id: int
    task: NodeTask


@dataclass(frozen=True, slots=True)
class CancelTask:
    node_id: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    node_id: int


@dataclass(frozen=True, slots=True)
class MissedHeartbeat:
    node_id: int


@dataclass(frozen=True, slots=True)
class RecordExit:
    node_id: int
    exit_code: int


@dataclass(frozen=True, slots=True)
class UpdateNode:
    """Fill in what the provider now says about a node (its agent URL changes on a restart)."""

    node_id: int
    agent_url: str


@dataclass(frozen=True, slots=True)
class ReplaceNodes:
    """Acceptance failed some nodes (node id → why): in one transaction mark them TERMINATING,
    write a launch intent for as many new nodes of the same target, keep the acceptance
    ``state`` in the launch document and move the cluster SETTING_UP → PROVISIONING (``reason``
    says which checks failed with their figures). The provider call follows (``Terminate``)."""

    reasons: Mapping[int, str]
    state: Mapping[str, Any]
    reason: str
    runs: tuple[Mapping[str, Any], ...] = ()  # the round's judged reports → bench_runs rows


@dataclass(frozen=True, slots=True)
class RecordAcceptance:
    """Keep the acceptance ``state`` in the launch document and the round's judged reports as
    ``bench_runs`` rows (``reason``: the round's summary, logged)."""

    state: Mapping[str, Any]
    reason: str
    runs: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class RecordActivity:
    """Stamp the cluster's ``last_activity_at`` (autostop counts idleness from it)."""


Action: TypeAlias = (
    Launch
    | FailOver
    | SetCluster
    | SetNode
    | SetIntent
    | Terminate
    | Stop
    | Start
    | SubmitTask
    | CancelTask
    | Heartbeat
    | MissedHeartbeat
    | RecordExit
    | UpdateNode
    | RecordActivity
    | ReplaceNodes
    | RecordAcceptance
)
