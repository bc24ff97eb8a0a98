"""The agent's wire models: request bodies of the HTTP API (``/v1``), validated with pydantic.

Owns the shape of the stop, exec, shutdown and registry-login requests the server sends to a
node, and of a submission's ``secrets``. The task
submission itself is :class:`gpulease.wire.NodeTask`, the type both sides share; its checkpoint
fields are checked for shape there, and whether ``checkpoint_store`` names a store is decided
when the task starts (:mod:`gpulease.agent.ckpt_sync`), so a bad URL fails the task with a
message instead of refusing the body. Responses are plain JSON built by
:mod:`gpulease.agent.service`; see ``docs/agent.md`` for both.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

API_VERSION = 1


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


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


class SubmittedSecrets(_Body):
    """The ``secrets`` field of ``POST /v1/tasks``, beside the task's own fields: the values of
    the task's secret set (``NodeTask.secret_set``), never part of the task itself. Names and
    values are checked by :func:`gpulease.agent.task_secrets.check_secrets`."""

    secrets: dict[str, SecretStr]


class RegistryLogin(_Body):
    """``PUT /v1/registries/{registry}``: the login the node pulls that registry's images with.
    The password is a :class:`~pydantic.SecretStr` (never in a repr, a log or an answer)."""

    username: str = Field(min_length=1, max_length=1024)
    password: SecretStr = Field(min_length=1, max_length=65536)
