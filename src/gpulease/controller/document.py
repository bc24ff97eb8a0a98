"""The launch document a cluster row carries in its ``task`` JSON column.

``clusters.task`` holds ``{"version": 2, "spec": {...}, "run": {...}, "plans": [...], "task_id":
..., "checkpoint": {...}}``: ``run`` is the typed :class:`~gpulease.wire.RunSpec` the server made
from the task (what the nodes run, its workdir and file mounts, the per-provider settings) — the
only part of the task the controller reads; ``spec`` is the normalised task as the user wrote it,
kept for the server's views (the controller never reads it); ``plans`` are the ranked launch
targets the optimizer chose. ``plans[0]`` is the first target; after ``k`` failovers
(``len(failover_history)``) the cluster aims at ``plans[k]``, and the next failover takes
``plans[k + 1]`` — so the plan list needs no column of its own. ``task_id`` (optional) is the
agent task id every attempt cluster of a managed job shares (``GPULEASE_TASK_ID`` stays the same
across recoveries); a plain cluster's is derived from its name and id. ``checkpoint`` (optional)
is a managed job's resolved :class:`~gpulease.wire.CheckpointSync`; ``acceptance`` (optional)
where acceptance on launch stands (:mod:`~gpulease.controller.acceptance`). Version 1 documents are
rewritten to version 2 by the state DB's migration 0003. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpulease.state import LaunchTarget
from gpulease.wire import CheckpointSync, NodeTask, RunSpec

DOCUMENT_VERSION = 2


@dataclass(frozen=True, slots=True)
class LaunchDocument:
    run: RunSpec
    plans: tuple[LaunchTarget, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)
    task_id: str | None = None
    checkpoint: CheckpointSync | None = None
    acceptance: Mapping[str, Any] | None = None  # controller/acceptance.py's AcceptanceState

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": DOCUMENT_VERSION,
            "spec": dict(self.spec),
            "run": self.run.model_dump(mode="json"),
            "plans": [asdict(p) for p in self.plans],
        }
        if self.task_id:
            data["task_id"] = self.task_id
        if self.checkpoint:
            data["checkpoint"] = self.checkpoint.model_dump(mode="json")
        if self.acceptance is not None:
            data["acceptance"] = dict(self.acceptance)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchDocument:
        checkpoint = data.get("checkpoint")
        return cls(
            run=RunSpec.model_validate(data.get("run") or {}),
            plans=tuple(LaunchTarget(**p) for p in data.get("plans", [])),
            spec=dict(data.get("spec") or {}),
            task_id=data.get("task_id") or None,
            checkpoint=CheckpointSync.model_validate(checkpoint) if checkpoint else None,
            acceptance=data.get("acceptance") or None,
        )

    def next_target(self, failovers: int) -> LaunchTarget | None:
        """The target after ``failovers`` failovers have given up ``plans[:failovers + 1]``."""
        index = failovers + 1
        return self.plans[index] if index < len(self.plans) else None


def task_id_of(name: str, cluster_id: int) -> str:
    """The agent task id of a cluster's task: stable across passes and server restarts."""
    return f"{name}-{cluster_id}"[-128:].lstrip("-._") or f"c{cluster_id}"


def cluster_task_id(name: str, cluster_id: int, task: Mapping[str, Any]) -> str:
    """The agent task id a cluster row's task runs under: its document's (a managed job's,
    shared by every attempt), else :func:`task_id_of`."""
    return LaunchDocument.from_json(task).task_id or task_id_of(name, cluster_id)


def node_task(
    doc: LaunchDocument,
    *,
    task_id: str,
    rank: int,
    node_ips: tuple[str, ...],
    gpus_per_node: int,
    agent_ports: tuple[int | None, ...] = (),
    accelerator: str | None = None,
) -> NodeTask:
    """What node ``rank`` runs (``agent_ports``: the nodes' agent ports, for the peers' round
    trips; ``accelerator``: the one rented, for the job's MFU)."""
    return NodeTask.for_node(
        doc.run,
        task_id=task_id,
        rank=rank,
        node_ips=node_ips,
        gpus_per_node=gpus_per_node,
        checkpoint=doc.checkpoint,
        agent_ports=agent_ports if any(p is not None for p in agent_ports) else (),
        accelerator=accelerator,
    )
