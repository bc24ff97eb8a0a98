"""The agent's wire models: request bodies of the HTTP API (``/v1``), validated with pydantic.

Owns the shape of what the server sends to a node (a task submission, stop and exec requests)
and the rules such a body must satisfy. The checkpoint fields of a submission are checked for
shape here; whether ``checkpoint_store`` names a store is decided when the task starts
(:mod:`gpulease.agent.ckpt_sync`), so a bad URL fails the task with a message instead of
refusing the body. Responses are plain JSON built by :mod:`gpulease.agent.service`; see
``docs/agent.md`` for both.
"""

from __future__ import annotations

import hashlib
import re

from pydantic import BaseModel, ConfigDict, Field, model_validator

API_VERSION = 1
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_SYNC_S = 7 * 24 * 3600.0  # a week; anything longer is a typo
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class TaskSubmission(_Body):
    """One task for one node. ``(task_id, attempt)`` is the idempotency key: the same pair never
    runs twice; a higher ``attempt`` of a finished task runs it again (a recovery on the same
    node), with the same ``GPULEASE_TASK_ID``."""

    task_id: str = Field(pattern=TASK_ID_PATTERN)
    attempt: int = Field(default=0, ge=0)
    setup: str | None = None
    run: str
    envs: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None  # a local path on the node: copied into the node's work dir
    file_mounts: dict[str, str] = Field(default_factory=dict)  # remote path -> local path
    node_rank: int = Field(default=0, ge=0)
    num_nodes: int = Field(default=1, ge=1)
    node_ips: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    gpus_per_node: int = Field(default=0, ge=0)
    master_port: int | None = Field(default=None, ge=1, le=65535)
    checkpoint_dir: str | None = None  # default: checkpoints/ in the work dir; relative: under it
    # where checkpoints are restored from and synced to (local://PATH, /abs/path, s3://BUCKET/P);
    # checked when the task starts: one that names no store fails the task (see ckpt_sync)
    checkpoint_store: str | None = Field(default=None, max_length=4096)
    # seconds between background syncs to checkpoint_store (None: DEFAULT_SYNC_S, 300)
    checkpoint_sync_s: float | None = Field(
        default=None, gt=0.0, le=MAX_SYNC_S, allow_inf_nan=False
    )

    @model_validator(mode="after")
    def _consistent(self) -> TaskSubmission:
        if self.node_rank >= self.num_nodes:
            raise ValueError("node_rank must be below num_nodes")
        if len(self.node_ips) != self.num_nodes:
            raise ValueError("node_ips must list one address per node")
        bad = [name for name in self.envs if not _ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"not valid environment variable names: {sorted(bad)}")
        for remote in self.file_mounts:
            if ".." in remote.replace("\\", "/").split("/"):
                raise ValueError(f"file_mounts: {remote!r} may not contain '..'")
        return self

    def digest(self) -> str:
        """A fingerprint of the whole submission: a repeat with another body is a conflict."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()

    def effective_master_port(self) -> int:
        """``master_port``, or one derived from the task id so every node agrees without asking
        and two local clusters rarely collide (29500-39499)."""
        if self.master_port is not None:
            return self.master_port
        return 29500 + int(hashlib.sha256(self.task_id.encode()).hexdigest(), 16) % 10000


class StopRequest(_Body):
    """A preemption notice or a cancel: SIGTERM the job's process group, SIGKILL after
    ``grace_s``."""

    grace_s: float = Field(default=30.0, ge=0.0, le=3600.0)


class ExecRequest(_Body):
    command: str = Field(min_length=1)
    timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0)


class ShutdownRequest(_Body):
    """Stop the agent; the task keeps running unless ``cancel_task``."""

    cancel_task: bool = False
    grace_s: float = Field(default=10.0, ge=0.0, le=3600.0)
