"""What one reconcile pass knows about one cluster: detached views of its rows, what the provider
lists, and what the agents answered — everything :func:`gpulease.controller.decide.decide` needs,
and nothing that can change under it. Owns the view types and :class:`Snapshot`. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpulease.bench.report import BenchReport
from gpulease.controller.document import LaunchDocument, task_id_of
from gpulease.controller.ports import AgentReport
from gpulease.providers.base import Instance, InstanceState
from gpulease.state import (
    ClusterStatus,
    IntentStatus,
    LaunchTarget,
    NodeState,
    current_target,
)
from gpulease.state.models import Cluster, LaunchIntent, Node
from gpulease.wire import TaskState


@dataclass(frozen=True, slots=True)
class ClusterView:
    id: int
    name: str
    owner: str
    status: ClusterStatus
    status_changed_at: float
    target: LaunchTarget
    document: LaunchDocument
    failovers: int
    autostop_minutes: int | None
    autostop_down: bool
    last_activity_at: float | None
    autostop_gpu_below: float | None = None  # the load rule's threshold (percent), if set
    gpu_active_at: float | None = None  # the relay last saw a GPU at/above it, or train progress
    gpu_seen_at: float | None = None  # the end of the newest telemetry bucket with GPU samples

    @property
    def task_id(self) -> str:
        return self.document.task_id or task_id_of(self.name, self.id)

    @classmethod
    def of(cls, row: Cluster) -> ClusterView:
        return cls(
            id=row.id,
            name=row.name,
            owner=row.owner,
            status=row.status,
            status_changed_at=row.status_changed_at,
            target=current_target(row),
            document=LaunchDocument.from_json(row.task),
            failovers=len(row.failover_history),
            autostop_minutes=row.autostop_minutes,
            autostop_down=row.autostop_down,
            last_activity_at=row.last_activity_at,
            autostop_gpu_below=row.autostop_gpu_below,
            gpu_active_at=row.gpu_active_at,
        )


@dataclass(frozen=True, slots=True)
class NodeView:
    id: int
    rank: int
    instance_id: str
    provider: str
    state: NodeState
    status_changed_at: float
    agent_url: str | None
    missed_heartbeats: int
    last_heartbeat_at: float | None
    exit_code: int | None

    @classmethod
    def of(cls, row: Node) -> NodeView:
        return cls(
            id=row.id,
            rank=row.node_rank,
            instance_id=row.instance_id,
            provider=row.provider,
            state=row.state,
            status_changed_at=row.status_changed_at,
            agent_url=row.agent_url,
            missed_heartbeats=row.missed_heartbeats,
            last_heartbeat_at=row.last_heartbeat_at,
            exit_code=row.exit_code,
        )


@dataclass(frozen=True, slots=True)
class IntentView:
    request_id: str
    status: IntentStatus
    attempt: int
    last_error: str | None
    status_changed_at: float = 0.0

    @classmethod
    def of(cls, row: LaunchIntent) -> IntentView:
        return cls(row.request_id, row.status, row.attempt, row.last_error, row.status_changed_at)

    @property
    def open(self) -> bool:
        return self.status in (IntentStatus.PENDING, IntentStatus.SUBMITTED)


@dataclass(frozen=True, slots=True)
class AcceptView:
    """A node's acceptance bench (its own node task): its state, and once it ended the report
    its output ended with, or why there is none (``detail``)."""

    task_state: TaskState | None
    report: BenchReport | None = None
    detail: str | None = None


GONE = frozenset({InstanceState.TERMINATED})


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One cluster at one moment. ``instances`` is None when the provider was not asked this
    pass (then nothing is concluded about instances); ``agents`` has a report for each node
    whose agent was polled."""

    now: float
    cluster: ClusterView
    nodes: tuple[NodeView, ...]
    intents: tuple[IntentView, ...]  # every intent of the cluster, oldest first
    instances: Mapping[str, Instance] | None = None
    agents: Mapping[int, AgentReport] = field(default_factory=dict)
    retry_at: float | None = None  # launch backoff: no provider launch before this time
    can_stop: bool = False  # the provider supports stop/start
    accept: Mapping[int, AcceptView] = field(default_factory=dict)  # by node id, while accepting
    # check name → the same offer's past quick bench figures (while accepting)
    accept_history: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def live_nodes(self) -> tuple[NodeView, ...]:
        return tuple(n for n in self.nodes if n.state is not NodeState.TERMINATED)

    @property
    def open_intent(self) -> IntentView | None:
        opened = [i for i in self.intents if i.open]
        return opened[-1] if opened else None

    @property
    def last_error(self) -> str:
        errors = [i.last_error for i in self.intents if i.last_error]
        return errors[-1] if errors else "launch failed"

    def instance_gone(self, node: NodeView) -> bool:
        """The provider confirms the node's instance gone (listed this pass and absent or
        TERMINATED). False when the provider was not asked."""
        if self.instances is None:
            return False
        found = self.instances.get(node.instance_id)
        return found is None or found.state in GONE

    def instance_state(self, node: NodeView) -> InstanceState | None:
        if self.instances is None:
            return None
        found = self.instances.get(node.instance_id)
        return None if found is None else found.state
