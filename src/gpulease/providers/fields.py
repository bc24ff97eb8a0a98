"""Checks of provider settings read from the config file, shared by the providers' settings
modules: every failure is a :class:`~gpulease.errors.UserInputError` naming the field
(``providers.<name>.<field>``). Moves no states."""

from __future__ import annotations

from typing import Any

from gpulease.errors import UserInputError


def text(where: str, value: Any, name: str) -> str:
    """A non-empty string, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise UserInputError(f"{where}.{name}: expected a non-empty string, got {value!r}")
    return value.strip()


def optional_text(where: str, value: Any, name: str) -> str | None:
    """None, or a non-empty string, stripped."""
    return None if value is None else text(where, value, name)
