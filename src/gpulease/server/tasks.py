"""A task as the server takes it: parsed once from the request body, with the spec's warnings,
and turned into what the controller stores — the typed :class:`~gpulease.wire.RunSpec` and the
display copy of the spec.

The client sends the task dumped once (``Task`` → JSON) with ``workdir`` and the local sources of
``file_mounts`` already absolute on this machine; the server parses it here, once, and nothing
below the server reads the spec by string keys. The task's ``secrets:`` come by name in the task
and by value in the request's own ``secrets`` field: :class:`TakenTask` holds the values (as
:class:`~pydantic.SecretStr`) for the launch path to hand to the vault, and its ``run`` and
``spec`` carry the names only. Moves no states; stores nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from gpulease.errors import UserInputError
from gpulease.spec import Task, task_from_dict_with_warnings
from gpulease.spec.container_image import image_reference, registry_of
from gpulease.wire import RunSpec


@dataclass(frozen=True, slots=True)
class TakenTask:
    """A request's task: the model, the warnings its parse gave, its run part and the values of
    its secrets (every name of ``task.secrets`` has one; ``run.secret_names`` lists them)."""

    task: Task
    warnings: tuple[str, ...]
    run: RunSpec
    secrets: Mapping[str, SecretStr] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        """The normalised task as the user wrote it (what views show)."""
        return self.task.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def take_task(
    data: Mapping[str, Any],
    *,
    workdir: str | None = None,
    secrets: Mapping[str, SecretStr] | None = None,
) -> TakenTask:
    """Parse the request's task once; ``workdir`` (an absolute path the client resolved) wins
    over the task's own; ``secrets`` (the request's ``secrets`` field) give the values of the
    task's secrets, as ``--secret`` does (they win over values in the task and add names it
    does not list). The client fills in envs and secrets without a value from its own side
    (``--env``, ``--secret``, its environment) and refuses the launch when one is left; the server
    never looks in its own environment: an env still without a value gets a warning and is left
    out, a secret without one refuses the launch (bad input naming it, never a value)."""
    task, warnings = task_from_dict_with_warnings(data, secrets=secrets)
    missing = sorted(name for name, value in task.secrets.items() if value is None)
    if missing:
        raise UserInputError(
            f"secrets: {', '.join(missing)} without a value: send each in the request's secrets "
            "field (gpulease launch --secret NAME[=VALUE])"
        )
    values = {name: value for name, value in task.secrets.items() if value is not None}
    broken = sorted(
        n for n, v in values.items() if any(c in v.get_secret_value() for c in "\r\n\0")
    )
    if broken:  # the node's agent holds them as KEY=VALUE lines (agent.task_secrets)
        raise UserInputError(
            f"secrets: {', '.join(broken)} holds a line break or NUL, which a node cannot pass "
            "on as an environment variable: give it encoded (base64) and decode it in the task"
        )
    return TakenTask(task, tuple(warnings), run_spec(task, workdir=workdir), values)


def run_spec(task: Task, *, workdir: str | None = None) -> RunSpec:
    """What the nodes run; local paths must be absolute (the client resolves relative ones
    against its own working directory, which the server does not share)."""
    chosen = workdir or task.workdir
    if chosen is not None:
        _require_absolute(chosen, "workdir")
    for remote, local in task.file_mounts.items():
        _require_absolute(local, f"file_mounts.{remote}")
    return RunSpec(
        run=task.run,
        setup=task.setup,
        envs={str(k): str(v) for k, v in task.envs.items()},
        workdir=chosen,
        file_mounts=dict(task.file_mounts),
        provider_config=dict(task.resources.provider_config),
        disk_gb=task.resources.disk.value if task.resources.disk else None,
        disk_tier=task.resources.disk_tier,
        acceptance=_acceptance(task),
        image=image_reference(task.resources.image_id) if task.resources.image_id else None,
        image_registry=registry_of(task.resources.image_id) if task.resources.image_id else None,
        secret_names=tuple(sorted(task.secrets)),
    )


def _acceptance(task: Task) -> dict[str, Any] | None:
    """``resources.acceptance`` as the controller reads it (plain JSON, seconds)."""
    spec = task.resources.acceptance
    if spec is None:
        return None
    return {"min_ratio": spec.min_ratio, "minimums": dict(spec.minimums),
            "max_replacements": spec.max_replacements,
            "checks": list(spec.checks) if spec.checks else None,
            "degraded_for_s": spec.degraded_for * 3600.0}  # fmt: skip


def _require_absolute(path: str, field: str) -> None:
    if not Path(path).expanduser().is_absolute():
        raise UserInputError(
            f"{field}: {path!r} is relative; the client resolves local paths before sending "
            "(Client.launch does), so send an absolute path"
        )
