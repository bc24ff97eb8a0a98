"""Reading and writing task files: the public entry points of the spec package.

- :func:`load_task` / :func:`parse_task` / :func:`task_from_dict` read a task (gpulease's own
  format or SkyPilot task YAML) and return a :class:`~gpulease.spec.models.Task`; fields read but
  not honoured are reported through :func:`warnings.warn` as :class:`SpecWarning`.
- :func:`load_task_with_warnings` / :func:`parse_task_with_warnings` return those warnings as
  text lines instead (for the CLI to print).
- Each of them takes, as keywords, what a launch adds to the file's ``envs`` and ``secrets``
  (:mod:`gpulease.spec.env_values`, :mod:`gpulease.spec.secret_vars`): ``envs`` (``--env
  NAME=VALUE``: they win over the file's), ``secrets`` (``--secret NAME=VALUE``: the same, for
  secrets), ``environ`` (where an env or secret the file lists without a value is looked up: the
  launching command's environment; None, the default: nowhere) and ``require_envs`` (an env or
  secret still without a value is then an error naming ``envs.NAME`` / ``secrets.NAME``;
  otherwise an env gets a warning and is left out, a secret stays without a value).
- :func:`dump_task` writes a task back in the format a user writes (``parse_task(dump_task(t))
  == t`` for a task without secret values: a dump names secrets only, with null values).

Any bad input, from unreadable files to wrong values, raises :class:`~gpulease.errors.SpecError`
naming the file, line and field.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import SecretStr, ValidationError

from gpulease.errors import SpecError
from gpulease.spec.diagnostics import spec_error
from gpulease.spec.env_values import fill_envs, require_values
from gpulease.spec.models import Task
from gpulease.spec.normalize import normalize
from gpulease.spec.secret_vars import fill_secrets
from gpulease.spec.yaml_lines import Document, dump_yaml, load_yaml

__all__ = [
    "SpecWarning",
    "dump_task",
    "load_task",
    "load_task_with_warnings",
    "parse_task",
    "parse_task_with_warnings",
    "task_from_dict",
]


Secrets = Mapping[str, str | SecretStr] | None  # --secret NAME=VALUE, the request's secrets


class SpecWarning(UserWarning):
    """A task field was read but is not honoured (e.g. a SkyPilot ``image_id``)."""


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "a list"
    return "text" if isinstance(value, str) else type(value).__name__


def _task_from_document(
    doc: Document,
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> tuple[Task, list[str]]:
    if doc.data is None:
        raise SpecError(
            "the task is empty; expected fields such as resources: and run:", source=doc.source
        )
    if not isinstance(doc.data, Mapping):
        raise SpecError(
            f"a task is a mapping of fields (name:, resources:, run: …), got {_kind(doc.data)}",
            line=doc.line(()),
            source=doc.source,
        )
    doc = fill_secrets(doc, overrides=secrets, environ=environ)
    doc = fill_envs(doc, overrides=envs, environ=environ)
    normalized = normalize(Document(dict(doc.data), doc.lines, doc.source))
    try:
        task = Task.model_validate(normalized.data)
    except ValidationError as exc:
        raise spec_error(exc, normalized, doc) from None
    except (ArithmeticError, RecursionError) as exc:  # a value too large or deep to handle
        raise SpecError(f"a value cannot be handled: {exc}", source=doc.source) from None
    if require_envs:
        require_values(doc)
    return task, normalized.warnings


def _emit(messages: list[str]) -> None:
    for message in messages:
        warnings.warn(message, SpecWarning, stacklevel=3)


def parse_task_with_warnings(
    text: str,
    source: str | None = None,
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> tuple[Task, list[str]]:
    """Parse task YAML; return the task and one line per field read but not honoured.
    ``envs``/``environ``/``require_envs``: values of envs given at launch (module docstring)."""
    if not isinstance(text, str):
        raise SpecError(f"expected YAML text, got {type(text).__name__}", source=source)
    return _task_from_document(
        load_yaml(text, source),
        envs=envs,
        secrets=secrets,
        environ=environ,
        require_envs=require_envs,
    )


def parse_task(
    text: str,
    source: str | None = None,
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> Task:
    """Parse task YAML (gpulease or SkyPilot form); warnings go to :func:`warnings.warn`."""
    task, messages = parse_task_with_warnings(
        text, source, envs=envs, secrets=secrets, environ=environ, require_envs=require_envs
    )
    _emit(messages)
    return task


def _read(path: str | os.PathLike[str]) -> str:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except UnicodeDecodeError as exc:
        raise SpecError(f"not UTF-8 text: {exc.reason}", source=os.fspath(path)) from None
    except OSError as exc:
        raise SpecError(
            f"cannot read the task file: {exc.strerror or exc}", source=os.fspath(path)
        ) from None


def load_task_with_warnings(
    path: str | os.PathLike[str],
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> tuple[Task, list[str]]:
    """Read a task file; return the task and one line per field read but not honoured.
    ``envs``/``environ``/``require_envs``: values of envs given at launch (module docstring)."""
    return parse_task_with_warnings(
        _read(path),
        os.fspath(path),
        envs=envs,
        secrets=secrets,
        environ=environ,
        require_envs=require_envs,
    )


def load_task(
    path: str | os.PathLike[str],
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> Task:
    """Read a task file (gpulease or SkyPilot form); warnings go to :func:`warnings.warn`."""
    task, messages = load_task_with_warnings(
        path, envs=envs, secrets=secrets, environ=environ, require_envs=require_envs
    )
    _emit(messages)
    return task


def task_from_dict_with_warnings(
    data: Mapping[str, Any],
    source: str | None = None,
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> tuple[Task, list[str]]:
    """Build a task from already-parsed data (the same forms as the YAML; no line numbers);
    return it and one line per field read but not honoured."""
    document = Document(data, {}, source)
    return _task_from_document(
        document, envs=envs, secrets=secrets, environ=environ, require_envs=require_envs
    )


def task_from_dict(
    data: Mapping[str, Any],
    source: str | None = None,
    *,
    envs: Mapping[str, str] | None = None,
    secrets: Secrets = None,
    environ: Mapping[str, str] | None = None,
    require_envs: bool = False,
) -> Task:
    """Build a task from already-parsed data (the same forms as the YAML; no line numbers)."""
    task, messages = task_from_dict_with_warnings(
        data, source, envs=envs, secrets=secrets, environ=environ, require_envs=require_envs
    )
    _emit(messages)
    return task


def with_providers(task: Task, providers: Sequence[str]) -> Task:
    """``task`` limited to ``providers`` (they replace ``resources.providers``), validated again
    (``--provider`` on the command line)."""
    data = task.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data.setdefault("resources", {})["providers"] = [p.lower() for p in providers]
    limited = _task_from_document(Document(data, {}, None))[0]
    return limited.model_copy(update={"secrets": dict(task.secrets)})  # the dump names them only


def dump_task(task: Task) -> str:
    """The task as YAML in the format a user writes; ``parse_task(dump_task(t)) == t`` (secrets:
    names only, each null)."""
    data = task.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return dump_yaml(data)
