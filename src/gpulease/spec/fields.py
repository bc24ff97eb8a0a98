"""Name, choice and mapping field types: lists of names, ``use_spot``, ``cpu_arch``, envs,
free-form config.

Like :mod:`gpulease.spec.quantities`, each type is an ``Annotated`` pydantic type: a
``BeforeValidator`` that accepts the forms a user writes (a name or a list of names; ``auto``;
``PORT: 8080``), and where the generated JSON Schema would not describe those forms, a
``WithJsonSchema``. Parsers raise :class:`ValueError`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

__all__ = [
    "CPU_ARCHES",
    "CpuArchChoice",
    "EnvVars",
    "ExcludedProviders",
    "JsonMapping",
    "Names",
    "NonEmptyNames",
    "ProviderNames",
    "SpotChoice",
    "lowercase",
    "parse_cpu_arch",
]


def lowercase(value: object) -> object:
    """Let ``BF16`` and ``Train`` match their lower-case choices."""
    return value.strip().lower() if isinstance(value, str) else value


# --- lists of names -----------------------------------------------------------------------------


def _one_or_many(value: object) -> object:
    """``"aws"`` → ``["aws"]``; a list passes through to be checked item by item."""
    return [value] if isinstance(value, str) else value


_PROVIDER_ALIASES = {"k8s": "kubernetes"}


def _provider_names(names: list[str]) -> list[str]:
    lowered = (name.strip().lower() for name in names)
    return [_PROVIDER_ALIASES.get(name, name) for name in lowered]


_NAMES_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}

NonEmptyNames = Annotated[
    list[str],
    Field(min_length=1),
    BeforeValidator(_one_or_many),
    WithJsonSchema({**_NAMES_SCHEMA, "examples": ["us-east-1", ["us-east-1", "eu-west-1"]]}),
]
"""A name or a list of names: ``us-east-1`` or ``[us-east-1, eu-west-1]``."""

ProviderNames = Annotated[
    list[str],
    Field(min_length=1),
    BeforeValidator(_one_or_many),
    AfterValidator(_provider_names),
    WithJsonSchema({**_NAMES_SCHEMA, "examples": ["aws", ["aws", "sim"]]}),
]
"""Provider names, lower-cased (``k8s`` is read as ``kubernetes``)."""

Names = Annotated[list[str], BeforeValidator(_one_or_many), WithJsonSchema(_NAMES_SCHEMA)]
"""A name or a list of names that may be empty (``exclude_regions``, ``data_policy``)."""

ExcludedProviders = Annotated[
    list[str],
    BeforeValidator(_one_or_many),
    AfterValidator(_provider_names),
    WithJsonSchema(_NAMES_SCHEMA),
]


# --- use_spot -----------------------------------------------------------------------------------

_SPOT_WORDS: dict[str, bool | Literal["auto"]] = {
    "true": True, "yes": True, "on": True,
    "false": False, "no": False, "off": False,
    "auto": "auto",
}  # fmt: skip


def _spot_choice(value: object) -> object:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _SPOT_WORDS:
        return _SPOT_WORDS[value.strip().lower()]
    raise ValueError(f"expected true, false or auto, got {value!r}")


SpotChoice = Annotated[
    bool | Literal["auto"],
    BeforeValidator(_spot_choice),
    WithJsonSchema({"anyOf": [{"type": "boolean"}, {"const": "auto"}]}),
]
"""``true`` (spot only), ``false`` (on-demand only) or ``auto`` (let the optimizer choose)."""


# --- cpu_arch -----------------------------------------------------------------------------------

CPU_ARCHES = ("x86_64", "arm64", "any")
_CPU_ARCH_ALIASES = {"amd64": "x86_64", "x86-64": "x86_64", "x64": "x86_64", "aarch64": "arm64"}


def parse_cpu_arch(value: object) -> str:
    """``x86_64``, ``arm64`` or ``any`` (any case; ``amd64``/``x86-64``/``x64`` and ``aarch64``
    are read as ``x86_64`` and ``arm64``); :class:`ValueError` otherwise."""
    if isinstance(value, str):
        text = value.strip().lower()
        text = _CPU_ARCH_ALIASES.get(text, text)
        if text in CPU_ARCHES:
            return text
    raise ValueError(
        f"expected x86_64, arm64 or any (amd64 and aarch64 are read as x86_64 and arm64), "
        f"got {value!r}"
    )


CpuArchChoice = Annotated[
    Literal["x86_64", "arm64", "any"],
    BeforeValidator(parse_cpu_arch),
    WithJsonSchema(
        {"enum": [*CPU_ARCHES, *_CPU_ARCH_ALIASES], "default": "x86_64", "examples": ["arm64"]}
    ),
]
"""The host CPU architecture a task runs on: ``x86_64`` (default), ``arm64`` or ``any``."""


# --- envs and free-form mappings -----------------------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_value(value: object) -> object:
    """YAML reads ``PORT: 8080`` as a number and ``DEBUG: true`` as a boolean; keep them as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _env_vars(value: object) -> object:
    if not isinstance(value, dict):
        return value
    for name in value:
        if isinstance(name, str) and not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return {name: _env_value(item) for name, item in value.items()}


EnvVars = Annotated[dict[str, str], BeforeValidator(_env_vars)]
"""Environment variables: names like ``HF_HOME``; numbers and booleans are kept as text."""


def _json_compatible(value: Any, path: str = "") -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path or 'value'}: {value!r} is not a finite number")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _json_compatible(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path or 'keys'}: keys must be text, got {key!r}")
            _json_compatible(item, f"{path}.{key}" if path else key)
        return
    raise ValueError(
        f"{path or 'value'}: expected text, numbers, booleans, lists or mappings, "
        f"got {type(value).__name__}"
    )


def _check_json_mapping(value: dict[str, Any]) -> dict[str, Any]:
    _json_compatible(value)
    return value


JsonMapping = Annotated[
    dict[str, Any],
    AfterValidator(_check_json_mapping),
    WithJsonSchema({"type": "object"}),
]
"""A free-form mapping that must survive JSON (the state DB stores tasks as JSON)."""
