"""The pools loop's brain: the pool's document (``pools.task`` JSON), what one pass knows about a
pool (:class:`PoolSnapshot`), and one pure function from it to the actions of one step
(:func:`decide_pool`), testable without a cloud, a DB or processes.

A pool node is an ordinary cluster (``clusters.pool_id``) the cluster loop provisions and sets up
with the pool's ``setup`` (its run is ``:``: the node only gets ready) — once per node; it then
rests SUCCEEDED, idle, until a managed job takes it (``clusters.job_id``). How a pool moves
(``gpulease.state.PoolStatus``; every move is table-checked, with history):

==============  ==========================================================================
status          rules
==============  ==========================================================================
PENDING         size it (:func:`~gpulease.controller.pool_sizing.size_pool`) → READY
READY           dead nodes (preempted, lost, failed) are terminated; size it; a node that
                could not be launched → FAILED (launches back off)
FAILED          as READY; a node up again → READY
SHUTTING_DOWN   terminate every node (busy ones too: their jobs recover, and fail once
                they find the pool down); none left (confirmed by the provider) → DOWN
==============  ==========================================================================

Moves no states itself: :mod:`~gpulease.controller.pool_loop` carries the actions out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, TypeAlias

from gpulease.controller.pool_sizing import PoolNode, SizingDecision, SizingPolicy, size_pool
from gpulease.state import ClusterStatus, LaunchTarget, NodeState, PoolStatus
from gpulease.state.machines import timeout_of
from gpulease.wire import RunSpec

POOL_DOCUMENT_VERSION = 1
LAUNCH_BACKOFF_S = 30.0  # after a node could not be launched, no new launch for this long
_C = ClusterStatus
_P = PoolStatus
_BOOTING = frozenset({_C.PENDING, _C.PROVISIONING, _C.SETTING_UP, _C.RUNNING, _C.STARTING})
_DEAD_NODE = frozenset(
    {NodeState.PREEMPTED, NodeState.LOST, NodeState.FAILED, NodeState.TERMINATING}
)
NodeKind: TypeAlias = Literal["provisioning", "busy", "idle", "dead", "leaving"]


@dataclass(frozen=True, slots=True)
class PoolDocument:
    """``{"version": 1, "spec", "run", "plans", "sizing"}``: the normalised pool task (views
    only), what each node runs once (its ``setup``; ``run`` is never used: jobs bring theirs), the
    ranked launch targets of a node, and the sizing bounds."""

    run: RunSpec
    plans: tuple[LaunchTarget, ...]
    sizing: SizingPolicy = field(default_factory=SizingPolicy)
    spec: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": POOL_DOCUMENT_VERSION,
            "spec": dict(self.spec),
            "run": self.run.model_dump(mode="json"),
            "plans": [asdict(p) for p in self.plans],
            "sizing": asdict(self.sizing),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PoolDocument:
        return cls(
            run=RunSpec.model_validate(data.get("run") or {}),
            plans=tuple(LaunchTarget(**p) for p in data.get("plans") or []),
            sizing=SizingPolicy(**(data.get("sizing") or {})),
            spec=dict(data.get("spec") or {}),
        )


@dataclass(frozen=True, slots=True)
class NodeClusterView:
    """One pool node (a cluster row) and its nodes' states."""

    id: int
    name: str
    status: ClusterStatus
    status_changed_at: float
    job_id: int | None
    failure: str | None
    num_nodes: int
    node_states: tuple[NodeState, ...] = ()

    @property
    def kind(self) -> NodeKind:
        """``leaving`` (being or already torn down), ``busy`` (a job holds it: the jobs loop
        owns it), ``dead`` (to be torn down), ``provisioning`` or ``idle``."""
        if self.status in (_C.TERMINATING, _C.TERMINATED):
            return "leaving"
        if self.job_id is not None:
            return "busy"
        if self.status is _C.FAILED or any(s in _DEAD_NODE for s in self.node_states):
            return "dead"
        if self.status in _BOOTING:
            return "provisioning"
        ready = [s for s in self.node_states if s is NodeState.READY]
        if self.status is _C.SUCCEEDED and len(ready) == self.num_nodes:
            return "idle"
        return "dead"

    def as_pool_node(self) -> PoolNode:
        kind = self.kind
        assert kind in ("provisioning", "busy", "idle")
        idle_since = self.status_changed_at if kind == "idle" else None
        return PoolNode(self.id, kind, idle_since)


@dataclass(frozen=True, slots=True)
class PoolView:
    id: int
    name: str
    status: PoolStatus
    status_changed_at: float
    doc: PoolDocument
    desired_nodes: int


@dataclass(frozen=True, slots=True)
class PoolSnapshot:
    now: float
    pool: PoolView
    nodes: tuple[NodeClusterView, ...]  # every node cluster not TERMINATED
    waiting: int  # managed jobs of the pool waiting for a node
    retry_at: float | None = None  # no launch before this (after a failed one)


@dataclass(frozen=True, slots=True)
class SetPool:
    status: PoolStatus
    reason: str


@dataclass(frozen=True, slots=True)
class AddNodes:
    """Create ``count`` node clusters (the cluster loop launches them by intent)."""

    count: int


@dataclass(frozen=True, slots=True)
class RemoveIdle:
    """Terminate these idle nodes — each only if it is still idle (compare-and-set)."""

    cluster_ids: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class DropNodes:
    """Terminate these nodes whatever they do (dead ones; every one on ``pool down``)."""

    cluster_ids: tuple[int, ...]
    reason: str
    launch_failed: bool = False  # one could not be launched: launches back off


@dataclass(frozen=True, slots=True)
class Record:
    """Keep the sizing decision: ``desired_nodes`` and the history of decisions."""

    decision: SizingDecision
    waiting: int


PoolAction: TypeAlias = SetPool | AddNodes | RemoveIdle | DropNodes | Record


def decide_pool(snap: PoolSnapshot) -> list[PoolAction]:
    """The actions of one step for the snapshot's pool (possibly none)."""
    status = snap.pool.status
    if status is _P.DOWN:
        return []
    if status is _P.SHUTTING_DOWN:
        return _shutting_down(snap)
    rule = timeout_of(status)
    if rule is not None and snap.now - snap.pool.status_changed_at >= rule.seconds:
        assert isinstance(rule.exit, PoolStatus)
        return [SetPool(rule.exit, f"timed out: {rule.why}")]
    return _serving(snap)


def _shutting_down(snap: PoolSnapshot) -> list[PoolAction]:
    live = [n for n in snap.nodes if n.status is not _C.TERMINATING]
    if live:
        return [DropNodes(tuple(n.id for n in live), "pool down")]
    if not snap.nodes:
        return [SetPool(_P.DOWN, "every node terminated (the provider confirms)")]
    return []  # TERMINATING nodes: the cluster loop confirms them gone


def _serving(snap: PoolSnapshot) -> list[PoolAction]:
    actions: list[PoolAction] = []
    dead = [n for n in snap.nodes if n.kind == "dead"]
    launch_failed = next((n for n in dead if n.failure == "launch"), None)
    if dead:
        why = "the node is dead (preempted, lost, or failed)"
        actions.append(DropNodes(tuple(n.id for n in dead), why, launch_failed is not None))
    counted = [n.as_pool_node() for n in snap.nodes if n.kind not in ("dead", "leaving")]
    decision = size_pool(snap.now, snap.waiting, counted, snap.pool.doc.sizing)
    backing_off = snap.retry_at is not None and snap.now < snap.retry_at
    if decision.add and (backing_off or launch_failed is not None):
        return [*actions, *_status(snap, counted, launch_failed)]  # no launch while backing off
    if decision.add:
        actions.append(AddNodes(decision.add))
    if decision.remove:
        actions.append(RemoveIdle(decision.remove, f"pool shrinks: {decision.reason}"))
    if decision.changes or decision.desired != snap.pool.desired_nodes:
        actions.append(Record(decision, snap.waiting))
    actions += _status(snap, counted, launch_failed)
    return actions


def _status(
    snap: PoolSnapshot, counted: list[PoolNode], launch_failed: NodeClusterView | None
) -> list[PoolAction]:
    status = snap.pool.status
    if launch_failed is not None and status is not _P.FAILED:
        return [SetPool(_P.FAILED, f"node {launch_failed.name} could not be launched")]
    if status is _P.PENDING:
        return [SetPool(_P.READY, "the pools loop sizes it")]
    if status is _P.FAILED and any(n.state in ("idle", "busy") for n in counted):
        return [SetPool(_P.READY, "a node is up again")]
    return []
