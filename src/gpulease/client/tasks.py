"""A task on its way to the server: taken as a :class:`~gpulease.spec.Task` or a mapping (either
format), its envs and secrets completed on this side (``envs`` / ``secrets`` overrides;
value-less ones from ``environ``, else an error naming them — the server never looks in its own
environment), its local paths made absolute against the caller's working directory — the server
does not share it — and dumped once into the request body. The task's secrets travel by name in
the task and by value only in the body's separate ``secrets`` field (never logged here).

Owns :func:`prepare_task`, :func:`post_task` (a prepared task sent, the warnings of both
sides merged) and :func:`resolve_workdir`. Moves no states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.errors import UserInputError

if TYPE_CHECKING:
    from pydantic import SecretStr

    from gpulease.jsonhttp import JsonHttp
    from gpulease.spec import Task


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """The request body's ``task`` (secrets named, never valued), ``workdir`` and ``secrets``
    (the values, still wrapped: the body's separate ``secrets`` field), and the warnings
    parsing gave here."""

    body: dict[str, Any]
    workdir: str | None
    warnings: tuple[str, ...]
    secrets: Mapping[str, SecretStr] = field(default_factory=dict)

    def secrets_field(self) -> dict[str, str]:
        """The request body's ``secrets``: NAME → value (the only place a value is unwrapped)."""
        return {name: value.get_secret_value() for name, value in self.secrets.items()}


def prepare_task(
    task: Task | Mapping[str, Any],
    *,
    workdir: str | None = None,
    cwd: Path | None = None,
    envs: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    secrets: Mapping[str, str | SecretStr] | None = None,
) -> PreparedTask:
    """Parse a mapping (a ``Task`` is used as is) with ``envs`` over its own and its value-less
    envs from ``environ`` (still missing: a SpecError naming them) — the same for ``secrets``
    (``--secret``: they win over the task's and add names) —, resolve ``workdir``
    (``workdir`` given here wins over the task's) and the local sources of ``file_mounts``
    against ``cwd`` (default: the current directory), and dump the task once (its secrets by
    name only)."""
    from gpulease.spec import Task, task_from_dict_with_warnings  # lazy: `status` needs no spec
    from gpulease.spec.secret_vars import secret_values

    warnings: list[str] = []
    if isinstance(task, Task) and (envs or secrets or None in task.secrets.values()):
        # validated again (the names must be env names); the dump names the secrets only
        secrets = {**secret_values(task.secrets), **(secrets or {})}
        task = task.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    if not isinstance(task, Task):
        task, warnings = task_from_dict_with_warnings(
            task, envs=envs, secrets=secrets, environ=environ, require_envs=True
        )
    base = cwd or Path.cwd()
    resolved = resolve_workdir(workdir or task.workdir, base)
    mounts = {remote: _absolute(local, base) for remote, local in task.file_mounts.items()}
    task = task.model_copy(update={"workdir": resolved, "file_mounts": mounts})
    body = task.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return PreparedTask(body, resolved, tuple(warnings), secret_values(task.secrets))


def resolve_workdir(workdir: str | None, cwd: Path | None = None) -> str | None:
    """The task's workdir as an absolute path (a relative one is taken from ``cwd``, default the
    current directory); it must be a directory."""
    if workdir is None:
        return None
    path = Path(_absolute(workdir, cwd or Path.cwd()))
    if not path.is_dir():
        raise UserInputError(f"workdir: no such directory: {workdir}")
    return str(path)


def _absolute(path: str, base: Path) -> str:
    """``path`` made absolute against ``base``; URLs (``s3://…``) are left as they are."""
    if "://" in path:
        return path
    return str((base / Path(path).expanduser()).resolve())


def post_task(
    http: JsonHttp,
    path: str,
    task: Task | Mapping[str, Any],
    *,
    workdir: str | None = None,
    envs: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    secrets: Mapping[str, str | SecretStr] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """POST ``{"task": ..., "workdir": ..., "secrets": ..., **fields}`` to ``path`` (the task
    prepared as :func:`prepare_task` does; ``secrets`` only when the task has some; ``fields``
    that are None are left out): the server's view, with this side's parse warnings first (each
    said once)."""
    prepared = prepare_task(task, workdir=workdir, envs=envs, environ=environ, secrets=secrets)
    body: dict[str, Any] = {"task": prepared.body, "workdir": prepared.workdir}
    if prepared.secrets:
        body["secrets"] = prepared.secrets_field()
    body.update({k: v for k, v in fields.items() if v is not None})
    view: dict[str, Any] = http.json("POST", path, json=body)
    said = [*prepared.warnings, *view.get("warnings", [])]
    return {**view, "warnings": list(dict.fromkeys(said))}
