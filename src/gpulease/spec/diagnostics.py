"""Turning pydantic validation errors into one :class:`~gpulease.errors.SpecError`.

Each pydantic error carries a ``loc`` in the normalized data (by alias, so in the names a user
writes). This module walks that location through the data, maps it back through the
normalization renames to the field the user wrote, looks up its line, and rewrites pydantic's
message into one that says what was expected, with a "did you mean" for unknown fields and
choices. Several errors become one SpecError: the first (by line) is its field and line, the others
follow in its message.
"""

from __future__ import annotations

import difflib
import re
from types import UnionType
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpulease.errors import SpecError
from gpulease.spec.models import Task
from gpulease.spec.normalize import Normalized
from gpulease.spec.yaml_lines import Document, Path

__all__ = ["field_names", "spec_error"]

_EXTRA_SPELLINGS: dict[str, tuple[str, ...]] = {"Resources": ("provider", "region")}


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside ``X | None`` or ``Annotated[X, ...]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, UnionType) or hasattr(annotation, "__metadata__"):
        for arg in get_args(annotation):
            if (model := _model_in(arg)) is not None:
                return model
    return None


def _field_of(model: type[BaseModel], key: Any) -> tuple[str, Any] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info.annotation
    return None


def model_at(path: Path) -> type[BaseModel] | None:
    """The model that validates the mapping at ``path`` (``("resources",)`` → Resources)."""
    model: type[BaseModel] | None = Task
    for key in path:
        found = _field_of(model, key) if model is not None else None
        model = _model_in(found[1]) if found is not None else None
    return model


def field_names(model: type[BaseModel]) -> list[str]:
    """The names a user writes for the fields of ``model`` (aliases first)."""
    names = [info.alias or name for name, info in model.model_fields.items()]
    return names + list(_EXTRA_SPELLINGS.get(model.__name__, ()))


def _key_in(node: Any, key: Any, path: Path) -> Any:
    """``key`` as it appears in the mapping ``node``: the field name when the alias is absent."""
    if isinstance(node, dict) and key not in node and isinstance(key, str):
        model = model_at(path)
        found = _field_of(model, key) if model is not None else None
        if found is not None and found[0] in node:
            return found[0]
    return key


def _data_path(loc: tuple[int | str, ...], data: Any, missing: bool) -> Path:
    """The part of ``loc`` that exists in ``data``; union branch tags and the like are dropped."""
    path: list[Any] = []
    node = data
    for loc_part in loc:
        part = _key_in(node, loc_part, tuple(path))
        found = isinstance(node, dict) and part in node
        if found or (isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)):
            node = node[part]
        else:
            if missing:
                path.append(part)
            break
        path.append(part)
    return tuple(path)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    kinds = {dict: "a mapping", list: "a list", str: "text", bool: "a boolean", type(None): "null"}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"the number {value!r}"
    return kinds.get(type(value), type(value).__name__)


def _did_you_mean(word: Any, choices: list[str]) -> str:
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _unknown_field(path: Path) -> str:
    model = model_at(path[:-1])
    names = field_names(model) if model is not None else []
    hint = _did_you_mean(path[-1], names)
    if names and not hint:
        hint = "; expected one of: " + ", ".join(names)
    return f"unknown field {_show(path[-1])}{hint}"


def _literal(error: ErrorDetails) -> str:
    choices = re.findall(r"'([^']*)'", str(error.get("ctx", {}).get("expected", "")))
    got = error["input"]
    return f"expected one of {', '.join(choices)}, got {_show(got)}" + _did_you_mean(got, choices)


_TEMPLATES = {
    "missing": "is required but missing",
    "too_short": "must not be empty",
    "string_type": "expected text, got {kind}",
    "list_type": "expected a list, got {kind}",
    "dict_type": "expected a mapping (key: value), got {kind}",
    "model_type": "expected a mapping of fields, got {kind}",
    "model_attributes_type": "expected a mapping of fields, got {kind}",
    "int_type": "expected a whole number, got {kind}",
    "int_parsing": "expected a whole number, got {value}",
    "int_from_float": "expected a whole number, got {value}",
    "float_type": "expected a number, got {kind}",
    "float_parsing": "expected a number, got {value}",
    "bool_type": "expected true or false, got {kind}",
    "bool_parsing": "expected true or false, got {value}",
    "greater_than": "must be greater than {gt}, got {value}",
    "greater_than_equal": "must be at least {ge}, got {value}",
    "less_than_equal": "must be at most {le}, got {value}",
    "finite_number": "must be a finite number, got {value}",
}


def _message(error: ErrorDetails, path: Path) -> str:
    kind = error["type"]
    ctx = error.get("ctx", {})
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind == "extra_forbidden" and path:
        return _unknown_field(path)
    if kind == "literal_error":
        return _literal(error)
    if kind in _TEMPLATES:
        value = error.get("input")
        numbers = {key: f"{ctx[key]:g}" for key in ("gt", "ge", "le") if key in ctx}
        return _TEMPLATES[kind].format(kind=_kind(value), value=_show(value), **numbers)
    return error["msg"]


def _problem(error: ErrorDetails, normalized: Normalized, doc: Document) -> SpecError:
    path = _data_path(error["loc"], normalized.data, error["type"] == "missing")
    return doc.error(normalized.origin(path), _message(error, path))


def spec_error(exc: ValidationError, normalized: Normalized, doc: Document) -> SpecError:
    """One SpecError for all of ``exc``'s errors, ordered by line."""
    problems: list[SpecError] = []
    for error in exc.errors(include_url=False):
        problem = _problem(error, normalized, doc)
        if all(str(problem) != str(seen) for seen in problems):
            problems.append(problem)
    problems.sort(key=lambda problem: problem.line or 0)
    first, others = problems[0], problems[1:]
    message = first.message + "".join(f"\n{other}" for other in others)
    return SpecError(message, field=first.field, line=first.line, source=first.source)
