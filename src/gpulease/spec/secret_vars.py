"""A task's ``secrets:`` (SkyPilot's field): environment variables whose values stay secret.

Owns

- :data:`SecretVars`, the field type of ``Task.secrets``: NAME → :class:`pydantic.SecretStr`, or
  None where the value is given at launch (``--secret NAME[=VALUE]``, or the variable NAME of the
  launching command's environment). Every dump of a task — ``model_dump()`` in either mode,
  ``model_dump_json()``, :func:`~gpulease.spec.dump_task`, the ``spec`` copy the server keeps —
  carries the names only, each with the value null: a value leaves the model only through
  ``SecretStr.get_secret_value()`` (:func:`secret_values` for a request body), and ``repr``
  shows ``SecretStr('**********')``;
- :func:`secret_name_problem`: what is wrong with a secret's name (not an environment variable
  name, one of the node variables gpulease sets, or also one of the task's ``envs``);
- :func:`looks_secret`: whether an env's name looks like a secret's (``HF_TOKEN``,
  ``WANDB_API_KEY``, ``AWS_ACCESS_KEY_ID``, ``DB_PASSWORD``), for the warning pointing to
  ``secrets:``;
- :func:`fill_secrets`: the values given at launch, merged into a document's ``secrets`` the way
  :mod:`gpulease.spec.env_values` merges ``--env`` into ``envs``.

No message here, or anywhere in the spec package, contains a secret's value — names only, and the
kind of a bad value (text, a list). Moves no states; never mutates its input.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, SecretStr, WithJsonSchema

from gpulease.spec.yaml_lines import Document
from gpulease.wire import NODE_VARIABLES

__all__ = [
    "SecretVars",
    "fill_secrets",
    "looks_secret",
    "missing_secret_hint",
    "secret_name_problem",
    "secret_value",
    "secret_values",
]

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_PREFIX = "GPULEASE_"
# the ends and parts of names that hold credentials: HF_TOKEN, WANDB_API_KEY, AWS_ACCESS_KEY_ID
# (half of a credential pair, and what leaks with the other half), DB_PASSWORD, AWS_SECRET_…
_SECRET_LOOKING = re.compile(
    r"(^|_)(TOKEN|KEY|KEY_ID|APIKEY)$|PASSWORD|PASSWD|SECRET|CREDENTIAL", re.IGNORECASE
)


def missing_secret_hint(name: object) -> str:
    """How to give a secret without a value (the same words at plan and at launch)."""
    return f"pass --secret {name}=… or set {name} in the environment"


def looks_secret(name: object) -> bool:
    """Whether an env called ``name`` probably holds a secret (case-insensitive): a name ending
    in ``_TOKEN``, ``_KEY``, ``_KEY_ID`` or ``_APIKEY``, or holding ``PASSWORD``, ``PASSWD``,
    ``SECRET`` or ``CREDENTIAL``. ``TOKENIZERS_PARALLELISM`` and ``MAX_TOKENS`` do not."""
    return isinstance(name, str) and _SECRET_LOOKING.search(name) is not None


def secret_name_problem(name: object, env_names: Container[object] = ()) -> str | None:
    """What is wrong with a secret called ``name`` in a task whose ``envs`` are named
    ``env_names`` (a mapping of them, or any collection), or None when nothing is."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        return f"{name!r} is not a valid environment variable name"
    if name in NODE_VARIABLES or name.upper().startswith(_RESERVED_PREFIX):
        return f"{name} is set by gpulease on every node (GPULEASE_*, MASTER_ADDR, NODE_RANK, …)"
    if name in env_names:
        return f"{name} is also in envs; give it in one of them (a secret: under secrets)"
    return None


def _kind(value: object) -> str:
    kinds = {dict: "a mapping", list: "a list", SecretStr: "text"}
    return kinds.get(type(value), type(value).__name__)


def secret_value(value: object) -> SecretStr | None:
    """A secret's value as written (text, a number or a boolean, as for envs) or None;
    :class:`ValueError` naming only the kind of anything else."""
    if value is None or isinstance(value, SecretStr):
        return value
    if isinstance(value, bool):
        return SecretStr("true" if value else "false")
    if isinstance(value, str | int | float):
        return SecretStr(str(value))
    raise ValueError(f"expected text, got {_kind(value)}")


def _secret_vars(value: object) -> object:
    if not isinstance(value, Mapping):
        return value  # pydantic says a mapping was expected (naming the kind only)
    checked: dict[str, SecretStr | None] = {}
    for name, item in value.items():
        problem = secret_name_problem(name)
        try:
            checked[name] = secret_value(item)
        except ValueError as exc:
            problem = problem or str(exc)
        if problem:
            raise ValueError(f"{name}: {problem}" if isinstance(name, str) else problem)
    return checked


def _names_only(value: Mapping[str, SecretStr | None]) -> dict[str, None]:
    return dict.fromkeys(value)


SecretVars = Annotated[
    dict[str, SecretStr | None],
    BeforeValidator(_secret_vars),
    PlainSerializer(_names_only, return_type=dict[str, None]),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": ENV_NAME.pattern},
            "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
            "examples": [{"HF_TOKEN": None, "WANDB_API_KEY": None}],
        }
    ),
]
"""Secrets: NAME → value or null (given at launch); dumped as names with null values."""


def secret_values(secrets: Mapping[str, SecretStr | None]) -> dict[str, SecretStr]:
    """The secrets that have a value (a request body's ``secrets`` field, still wrapped)."""
    return {name: value for name, value in secrets.items() if value is not None}


def fill_secrets(
    doc: Document,
    *,
    overrides: Mapping[str, str | SecretStr] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Document:
    """``doc`` with its ``secrets`` completed: ``overrides`` (``--secret NAME=VALUE``, the
    request's ``secrets`` field) win over the file's values and add names it does not list;
    each secret still without a value takes the variable of that name in ``environ`` (None: not
    looked up). An env of the same name without a value gives way to the secret (a SkyPilot
    task that lists ``HF_TOKEN:`` under envs, launched with ``--secret HF_TOKEN``)."""
    data = doc.data
    if not isinstance(data, Mapping) or (not overrides and "secrets" not in data):
        return doc
    secrets = data.get("secrets")
    if secrets is None:
        secrets = {}
    if not isinstance(secrets, Mapping):  # a list or text: the pre-pass says what is wrong
        return doc
    filled: dict[Any, Any] = {**secrets, **(overrides or {})}
    for name, value in filled.items():
        if value is None and environ is not None and isinstance(name, str) and name in environ:
            filled[name] = environ[name]
    out: dict[Any, Any] = {**data, "secrets": filled}
    envs = data.get("envs")
    if isinstance(envs, Mapping):
        out["envs"] = {k: v for k, v in envs.items() if not (v is None and k in filled)}
    return Document(out, doc.lines, doc.source)
