"""How many nodes a pool wants: one pure function of the queue of jobs waiting for the pool, its
nodes and their states, the pool's bounds and idle timeout, and the clock — testable in virtual
time without a DB, a provider or processes.

:func:`size_pool` returns a :class:`SizingDecision`: nodes to add and idle nodes to remove, with
the reason. The rules:

- **grow while jobs wait**: one node per waiting job beyond the idle nodes (which those jobs take
  next) and the nodes still booting (which will take them when they are up);
- **shrink when idle**: an idle node idle for at least ``idle_timeout_s`` is removed, oldest idle
  first — but never one a waiting job is about to take;
- **bounds**: the pool is brought up to ``min_nodes`` and never grows past ``max_nodes``; a
  removal never takes it below ``min_nodes``; a busy or booting node is never removed.

Moves no states: the pools loop (:mod:`~gpulease.controller.pool_loop`) carries the decision out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

NodeState: TypeAlias = Literal["provisioning", "busy", "idle"]


@dataclass(frozen=True, slots=True)
class PoolNode:
    """One live node of the pool: ``provisioning`` (launching, or running the pool's setup),
    ``busy`` (a job runs on it) or ``idle`` (set up, no job) since ``idle_since``."""

    id: int
    state: NodeState
    idle_since: float | None = None


@dataclass(frozen=True, slots=True)
class SizingPolicy:
    """The pool's bounds and idle timeout (seconds), from its ``pool:`` section."""

    min_nodes: int = 0
    max_nodes: int = 4
    idle_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.min_nodes < 0 or self.max_nodes < max(self.min_nodes, 1):
            raise ValueError(f"pool bounds: need 0 <= min <= max, max >= 1 (got {self})")
        if self.idle_timeout_s < 0:
            raise ValueError("pool idle timeout must be >= 0")


@dataclass(frozen=True, slots=True)
class SizingDecision:
    """``add`` new nodes, ``remove`` these idle nodes; ``desired`` is the node count after both
    (always within the policy's bounds when the live count was); ``reason`` says why."""

    add: int
    remove: tuple[int, ...]
    desired: int
    reason: str

    @property
    def changes(self) -> bool:
        return self.add > 0 or bool(self.remove)


def size_pool(
    now: float, waiting: int, nodes: Sequence[PoolNode], policy: SizingPolicy
) -> SizingDecision:
    """The pool's next sizing step: ``waiting`` jobs queue for it, ``nodes`` are its live nodes
    (those being torn down are not counted)."""
    live = len(nodes)
    idle = sorted((n for n in nodes if n.state == "idle"), key=_idle_key)
    booting = sum(1 for n in nodes if n.state == "provisioning")
    unserved = max(0, waiting - len(idle) - booting)
    add = max(unserved, policy.min_nodes - live)
    add = max(0, min(add, policy.max_nodes - live))
    if add:
        why = _grow_reason(waiting, unserved, live, policy)
        return SizingDecision(add, (), live + add, why)
    remove = _expired(now, idle, waiting, live, policy)
    if remove:
        why = (
            f"{len(remove)} node(s) idle for {policy.idle_timeout_s:g} s or more "
            f"({waiting} job(s) waiting, min {policy.min_nodes})"
        )
        if live > policy.max_nodes:
            why = f"{live} nodes, above max {policy.max_nodes}: idle ones removed"
        return SizingDecision(0, remove, live - len(remove), why)
    return SizingDecision(0, (), live, "steady")


def _idle_key(node: PoolNode) -> tuple[float, int]:
    return (node.idle_since if node.idle_since is not None else float("-inf"), node.id)


def _grow_reason(waiting: int, unserved: int, live: int, policy: SizingPolicy) -> str:
    if live < policy.min_nodes and unserved <= policy.min_nodes - live:
        return f"{live} node(s), below min {policy.min_nodes}"
    capped = " (capped at max)" if live + unserved > policy.max_nodes else ""
    return f"{waiting} job(s) waiting, {unserved} without a node{capped}"


def _expired(
    now: float, idle: list[PoolNode], waiting: int, live: int, policy: SizingPolicy
) -> tuple[int, ...]:
    """Idle nodes to remove, oldest idle first: those past the idle timeout (any idle one while
    the pool is above max), less the newest idle ones that waiting jobs take next, never below
    min."""
    spare = idle[: max(0, len(idle) - waiting)]  # the newest idle ones go to waiting jobs
    over_max = max(0, live - policy.max_nodes)
    room = max(0, live - policy.min_nodes)
    chosen: list[int] = []
    for node in spare:
        if len(chosen) >= room:
            break
        since = node.idle_since if node.idle_since is not None else now
        if len(chosen) < over_max or now - since >= policy.idle_timeout_s:
            chosen.append(node.id)
    return tuple(chosen)
