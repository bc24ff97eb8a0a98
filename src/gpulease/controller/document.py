"""The launch document a cluster row carries in its ``task`` JSON column.

``clusters.task`` holds ``{"version": 1, "spec": {...}, "plans": [...], "task_id": ...}``: the
task spec as the user wrote it (normalised by :mod:`gpulease.spec`, which the controller does
not import) and the ranked launch targets the optimizer chose. ``plans[0]`` is the first target;
after ``k`` failovers (``len(failover_history)``) the cluster aims at ``plans[k]``, and the next
failover takes ``plans[k + 1]`` — so the plan list needs no column of its own. ``task_id``
(optional) is the agent task id every attempt cluster of a managed job shares
(``GPULEASE_TASK_ID`` stays the same across recoveries); a plain cluster's is derived from its
name and id. ``checkpoint``
(optional) is the resolved checkpoint sync of a managed job: ``{"dir", "store", "sync_s"}``.
Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gpulease.controller.ports import NodeTask
from gpulease.state import LaunchTarget

DOCUMENT_VERSION = 1
NO_RUN = ":"  # the run script of a task without ``run`` (the cluster only provisions)


@dataclass(frozen=True, slots=True)
class LaunchDocument:
    spec: Mapping[str, Any]
    plans: tuple[LaunchTarget, ...]
    task_id: str | None = None
    checkpoint: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": DOCUMENT_VERSION,
            "spec": dict(self.spec),
            "plans": [asdict(p) for p in self.plans],
        }
        if self.task_id:
            data["task_id"] = self.task_id
        if self.checkpoint:
            data["checkpoint"] = dict(self.checkpoint)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchDocument:
        """Read a document; a bare spec (no ``version``) is read as a spec without plans."""
        if "version" not in data:
            return cls(spec=dict(data), plans=())
        plans = tuple(LaunchTarget(**p) for p in data.get("plans", []))
        return cls(
            spec=dict(data.get("spec") or {}),
            plans=plans,
            task_id=data.get("task_id") or None,
            checkpoint=data.get("checkpoint") or None,
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
    workdir: str | None,
) -> NodeTask:
    """What node ``rank`` runs."""
    spec = doc.spec
    envs = {str(k): str(v) for k, v in (spec.get("envs") or {}).items()}
    mounts = {str(k): str(v) for k, v in (spec.get("file_mounts") or {}).items()}
    checkpoint = doc.checkpoint or {}
    sync_s = checkpoint.get("sync_s")
    return NodeTask(
        task_id=task_id,
        run=spec.get("run") or NO_RUN,
        setup=spec.get("setup") or None,
        envs=envs,
        workdir=workdir,
        file_mounts=mounts,
        node_rank=rank,
        num_nodes=len(node_ips),
        node_ips=node_ips,
        gpus_per_node=gpus_per_node,
        checkpoint_dir=checkpoint.get("dir") or None,
        checkpoint_store=checkpoint.get("store") or None,
        checkpoint_sync_s=float(sync_s) if sync_s else None,
    )
