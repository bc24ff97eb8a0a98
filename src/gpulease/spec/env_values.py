"""Values for a task's ``envs`` given at launch rather than in the file, as SkyPilot takes them.

A SkyPilot task may list an env without a value (``HF_TOKEN:`` or ``HF_TOKEN: null``): it must be
provided at launch, by ``--env HF_TOKEN=…`` or from the environment of the launching command.
:func:`fill_envs` takes the document read from a file and returns one whose ``envs``

- hold the ``overrides`` (``--env NAME=VALUE``, ``--env-file``; they win over the file's values,
  and a name the file does not list is added), then
- for each entry still without a value, the value of that name in ``environ`` (the caller's
  environment; None: not looked up).

An entry still without a value is left for :mod:`gpulease.spec.normalize` to warn about and
leave out (``plan``); at a launch, :func:`require_values` makes it a
:class:`~gpulease.errors.SpecError` naming ``envs.NAME`` and its line. The values are often
secrets (``HF_TOKEN``, ``WANDB_API_KEY``): no message here, or anywhere in the spec package,
contains one — messages name variables only. The same check covers ``secrets``
(:mod:`gpulease.spec.secret_vars` fills them). Moves no states; never mutates its input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpulease.errors import SpecError
from gpulease.spec.secret_vars import missing_secret_hint
from gpulease.spec.yaml_lines import Document

__all__ = ["fill_envs", "missing_env_hint", "require_values"]


def missing_env_hint(name: object) -> str:
    """How to give an env without a value (the same words at plan and at launch)."""
    return f"pass --env {name}=… or set {name} in the environment"


def fill_envs(
    doc: Document,
    *,
    overrides: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Document:
    """``doc`` with its envs completed from ``overrides`` and ``environ``; see the module."""
    data = doc.data
    if not isinstance(data, Mapping) or (not overrides and environ is None):
        return doc
    envs = data.get("envs")
    if envs is None:
        envs = {}
    if not isinstance(envs, Mapping):  # a list or a string: the models say what is wrong
        return doc
    filled: dict[Any, Any] = {**envs, **(overrides or {})}
    for name, value in filled.items():
        if value is None and environ is not None and isinstance(name, str) and name in environ:
            filled[name] = environ[name]
    if not filled and "envs" not in data:
        return doc
    return Document({**data, "envs": filled}, doc.lines, doc.source)


def _without_value(doc: Document, field: str) -> list[Any]:
    found = doc.data.get(field) if isinstance(doc.data, Mapping) else None
    return [n for n, v in found.items() if v is None] if isinstance(found, Mapping) else []


def require_values(doc: Document) -> None:
    """Raise one SpecError for the envs and secrets of ``doc`` still without a value: the first
    (by line) names its field and line, the others follow one per line in the same form."""
    errors = [
        doc.error(("envs", name), f"has no value: {missing_env_hint(name)}")
        for name in _without_value(doc, "envs")
    ]
    errors += [
        doc.error(("secrets", name), f"has no value: {missing_secret_hint(name)}")
        for name in _without_value(doc, "secrets")
    ]
    if not errors:
        return
    errors.sort(key=lambda error: error.line or 0)
    first, rest = errors[0], errors[1:]
    message = "\n".join([first.message, *(str(error) for error in rest)])
    raise SpecError(message, field=first.field, line=first.line, source=first.source)
