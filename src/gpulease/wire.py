"""The vocabulary the server and the node agents share — one base module both may import.

Owns what crosses the boundary between the controller (server side) and the agent (node side),
and what user code and the agent agree on:

- :class:`RunSpec` — what a task runs (``run``, ``setup``, ``envs``, ``workdir``,
  ``file_mounts``, ``provider_config``): typed once by the server from the task spec and carried
  in the launch and job documents, so nothing below the server reads the spec by string keys;
  ``image`` / ``image_registry`` name the task's container image and the registry whose
  credentials pull it — a name only: the secret never rides in a run document, a NodeTask, a
  repr or a log (docs/containers.md);
- :class:`NodeTask` — the task as one node runs it: the body of ``POST /v1/tasks`` on the agent,
  built by the controller and validated by the agent, the same model on both sides;
- :class:`TaskState` and its :data:`TERMINAL` / :data:`STARTED` sets — a node task's states (the
  agent's transition table is :data:`gpulease.agent.state.TRANSITIONS`);
- :data:`PREEMPTED_EXIT_CODE` (75) — "preempted, checkpoint taken, resume me";
- :data:`SERVICE_VARIABLE` — the variable naming the service a replica's task belongs to;
- :data:`NODE_VARIABLES` — the variables the agent sets on every node, which a task's ``envs``
  cannot override and its ``secrets`` may not be named (the agent's ``env`` module sets them);
- :class:`LogChunk` and :class:`ExecResult` — a piece of a task's output, a command's result.

Pure data; moves no states. The path from a task file to a node process is described in
``docs/architecture.md``.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

PREEMPTED_EXIT_CODE = 75  # "preempted, checkpoint taken, resume me" (gpulease.train exits so)
SERVICE_VARIABLE = "GPULEASE_SERVICE"  # set in a service replica's envs (its service's name)
NODE_VARIABLES = (
    "GPULEASE_NODE_RANK",
    "GPULEASE_NUM_NODES",
    "GPULEASE_NODE_IPS",
    "GPULEASE_GPUS_PER_NODE",
    "GPULEASE_TASK_ID",
    "GPULEASE_CHECKPOINT_DIR",
    "GPULEASE_PREEMPTION_FILE",
    "GPULEASE_TRAIN_STATS_FILE",
    "GPULEASE_ACCELERATOR",
    "GPULEASE_WORK_DIR",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NODE_RANK",
    "NNODES",
)
NO_RUN = ":"  # the run script of a task without ``run`` (the cluster only provisions)
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_SYNC_S = 7 * 24 * 3600.0  # a week; anything longer is a typo
MASTER_PORT_BASE, MASTER_PORT_END = 29500, 32768  # derived torchrun master ports: [base, end)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class TaskState(enum.StrEnum):
    """A node task's state, as the agent reports it."""

    PENDING = "PENDING"
    SETTING_UP = "SETTING_UP"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PREEMPTED = "PREEMPTED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset(
    {TaskState.SUCCEEDED, TaskState.FAILED, TaskState.PREEMPTED, TaskState.CANCELLED}
)
STARTED = TERMINAL | {TaskState.RUNNING}  # the task got past its setup (or ended)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RunSpec(_Frozen):
    """What a task runs, wherever it runs: the part of a task spec below the server.

    ``workdir`` is an absolute path on the server's machine (resolved by the client), or None;
    ``file_mounts`` maps a path on the node to a local path; ``provider_config`` is the task's
    per-provider settings (``{provider: {...}}``); ``disk_gb`` and ``disk_tier`` are the task's
    ``resources.disk`` (GB) and ``resources.disk_tier``, for the providers that size and choose
    the node's disk (aws: its root EBS volume)."""

    run: str | None = None
    setup: str | None = None
    envs: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None
    file_mounts: dict[str, str] = Field(default_factory=dict)
    provider_config: dict[str, Any] = Field(default_factory=dict)
    disk_gb: float | None = Field(default=None, gt=0.0, allow_inf_nan=False)
    disk_tier: str | None = None
    # resources.image_id: docker:REF, as a reference the node's Docker or Podman pulls (REF)
    image: str | None = Field(default=None, min_length=1, max_length=4096)
    # the registry host the image comes from (docker.io, ghcr.io, localhost:5000): the key of
    # its credentials in the config's containers.registries; never the credentials themselves
    image_registry: str | None = Field(default=None, min_length=1, max_length=255)
    # the task's ``secrets:``: the id of their encrypted set in the server's vault (never a
    # value), and their names (views may show names)
    secret_set: str | None = Field(default=None, min_length=1, max_length=128)
    secret_names: tuple[str, ...] = ()
    # resources.acceptance for the controller (controller/acceptance.py): min_ratio, minimums,
    # max_replacements, checks, degraded_for_s; None: the nodes are not benched before setup
    acceptance: dict[str, Any] | None = None


class CheckpointSync(_Frozen):
    """A managed job's resolved checkpoint sync: where on the node (``dir``, relative: inside
    the work dir), the store it syncs with (``local://…``, ``s3://…``) and how often."""

    dir: str | None = None
    store: str | None = None
    sync_s: float | None = None


class NodeTask(_Frozen):
    """One task for one node. ``(task_id, attempt)`` is the idempotency key: the same pair never
    runs twice; a higher ``attempt`` of a finished task runs it again (a recovery on the same
    node), with the same ``GPULEASE_TASK_ID``. The same cluster always yields the same value, so
    a re-submission is a no-op on the agent."""

    task_id: str = Field(pattern=TASK_ID_PATTERN)
    attempt: int = Field(default=0, ge=0)
    setup: str | None = None
    run: str
    envs: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None  # a path on the node: copied into the node's work dir
    file_mounts: dict[str, str] = Field(default_factory=dict)  # node path -> path on the node
    node_rank: int = Field(default=0, ge=0)
    num_nodes: int = Field(default=1, ge=1)
    node_ips: tuple[str, ...] = ("127.0.0.1",)
    gpus_per_node: int = Field(default=0, ge=0)
    master_port: int | None = Field(default=None, ge=1, le=65535)
    checkpoint_dir: str | None = None  # default: checkpoints/ in the work dir; relative: under it
    # where checkpoints are restored from and synced to (local://PATH, /abs/path, s3://BUCKET/P);
    # checked when the task starts: one that names no store fails the task (agent.ckpt_sync)
    checkpoint_store: str | None = Field(default=None, max_length=4096)
    # seconds between background syncs to checkpoint_store (None: the agent's default, 300)
    checkpoint_sync_s: float | None = Field(
        default=None, gt=0.0, le=MAX_SYNC_S, allow_inf_nan=False
    )
    # each node's agent port, by rank (None: the same port as this node's agent, the providers
    # that bind one fixed port everywhere); the agents measure their peers' round trip with it
    agent_ports: tuple[int | None, ...] = ()
    # the accelerator the cluster rented (a catalog name: T4, H100): GPULEASE_ACCELERATOR
    accelerator: str | None = Field(default=None, max_length=64)
    # the container image setup and run go inside (RunSpec.image), None: on the node itself
    image: str | None = Field(default=None, min_length=1, max_length=4096)
    # the registry whose credentials pull ``image`` (RunSpec.image_registry): a name, no secret
    image_registry: str | None = Field(default=None, min_length=1, max_length=255)
    # the vault id of the task's secrets (RunSpec.secret_set): the server sends their values
    # beside the task in the submission's ``secrets`` field, never inside the NodeTask
    secret_set: str | None = Field(default=None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _consistent(self) -> NodeTask:
        if self.node_rank >= self.num_nodes:
            raise ValueError("node_rank must be below num_nodes")
        if len(self.node_ips) != self.num_nodes:
            raise ValueError("node_ips must list one address per node")
        if self.agent_ports and len(self.agent_ports) != self.num_nodes:
            raise ValueError("agent_ports must list one port (or null) per node")
        if any(p is not None and not 0 < p < 65536 for p in self.agent_ports):
            raise ValueError("agent_ports: ports are 1-65535")
        bad = [name for name in self.envs if not _ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"not valid environment variable names: {sorted(bad)}")
        for remote in self.file_mounts:
            if ".." in remote.replace("\\", "/").split("/"):
                raise ValueError(f"file_mounts: {remote!r} may not contain '..'")
        return self

    @classmethod
    def for_node(
        cls,
        run: RunSpec,
        *,
        task_id: str,
        rank: int,
        node_ips: tuple[str, ...],
        gpus_per_node: int,
        checkpoint: CheckpointSync | None = None,
        agent_ports: tuple[int | None, ...] = (),
        accelerator: str | None = None,
    ) -> NodeTask:
        """What node ``rank`` of a cluster running ``run`` runs."""
        ckpt = checkpoint or CheckpointSync()
        return cls(
            task_id=task_id,
            run=run.run or NO_RUN,
            setup=run.setup or None,
            envs=dict(run.envs),
            workdir=run.workdir,
            file_mounts=dict(run.file_mounts),
            node_rank=rank,
            num_nodes=len(node_ips),
            node_ips=node_ips,
            gpus_per_node=gpus_per_node,
            checkpoint_dir=ckpt.dir,
            checkpoint_store=ckpt.store,
            checkpoint_sync_s=ckpt.sync_s if ckpt.store else None,
            agent_ports=agent_ports,
            accelerator=accelerator,
            image=run.image,
            image_registry=run.image_registry if run.image else None,
            secret_set=run.secret_set,
        )

    def digest(self) -> str:
        """A fingerprint of the whole task: a repeat with another body is a conflict."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def effective_master_port(self) -> int:
        """``master_port``, or one derived from the task id so every node agrees without asking
        and two local clusters rarely collide: 29500-32767, below the kernel's range for outgoing
        connections (32768-60999 on Linux), so a node's own outgoing traffic never holds it."""
        if self.master_port is not None:
            return self.master_port
        return MASTER_PORT_BASE + int(hashlib.sha256(self.task_id.encode()).hexdigest(), 16) % (
            MASTER_PORT_END - MASTER_PORT_BASE
        )

    def wire(self) -> dict[str, Any]:
        """The JSON body the agent accepts (the checkpoint-sync fields only when the task
        syncs, ``agent_ports``, ``accelerator`` and the image fields only when known, so a body
        without them is what older agents accepted)."""
        exclude = set() if self.checkpoint_store else {"checkpoint_store", "checkpoint_sync_s"}
        if not self.agent_ports:
            exclude.add("agent_ports")
        if self.accelerator is None:
            exclude.add("accelerator")
        if self.image is None:
            exclude |= {"image", "image_registry"}
        elif self.image_registry is None:
            exclude.add("image_registry")
        if self.secret_set is None:
            exclude.add("secret_set")
        return self.model_dump(mode="json", exclude=exclude or None)


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes ``[offset, next_offset)`` of a task's output on one node; ``size`` is the log's
    size when read (None where unknown); ``complete``: the task ended and every byte up to
    ``next_offset`` was handed out."""

    data: bytes
    offset: int
    next_offset: int
    complete: bool
    state: TaskState
    size: int | None = None


@dataclass(frozen=True, slots=True)
class ExecResult:
    """A command run on a node with the task's environment (``exit_code`` None: killed at its
    timeout)."""

    exit_code: int | None
    output: str
    timed_out: bool
    truncated: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExecResult:
        return cls(
            exit_code=data.get("exit_code"),
            output=str(data.get("output", "")),
            timed_out=bool(data.get("timed_out")),
            truncated=bool(data.get("truncated")),
        )


__all__ = [
    "MAX_SYNC_S",
    "NO_RUN",
    "PREEMPTED_EXIT_CODE",
    "STARTED",
    "TASK_ID_PATTERN",
    "TERMINAL",
    "CheckpointSync",
    "ExecResult",
    "LogChunk",
    "NodeTask",
    "RunSpec",
    "TaskState",
]
