"""The base of every task model: frozen, strict about unknown fields, either name accepted.

Owns :class:`SpecModel`'s configuration (no states): ``extra="forbid"`` so a misspelt field is an
error naming it, aliases and field names both accepted, field docstrings as JSON Schema
descriptions, and builds deferred until first use (the CLI imports the models on every run).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["SpecModel"]


class SpecModel(BaseModel):
    """A frozen task model; see the module docstring."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        arbitrary_types_allowed=True,
        validate_by_name=True,
        validate_by_alias=True,
        use_attribute_docstrings=True,
        coerce_numbers_to_str=True,
        defer_build=True,
    )
