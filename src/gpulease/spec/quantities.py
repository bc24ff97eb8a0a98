"""Quantity field types: how ``7B``, ``36h``, ``$500``, ``32GB+`` and whole numbers are read.

Each type pairs a parser (a pydantic ``BeforeValidator`` wrapping :mod:`gpulease.units`), a
serializer used only in JSON mode (so ``model_dump()`` keeps the internal floats while
``model_dump(mode="json", by_alias=True)`` gives the text a user writes: ``7B``, ``36h``,
``$500``, ``32+``) and the JSON Schema of the user-facing form. The serializers choose the
shortest friendly text that parses back to exactly the same value, and fall back to a plain number.

Every parser raises :class:`ValueError` (pydantic turns it into a validation error; the loader
adds the field path and line).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

from gpulease.units import Minimum, parse_count, parse_duration_hours, parse_minimum, parse_money

__all__ = [
    "Count",
    "Duration",
    "MinimumAmount",
    "Money",
    "NonNegativeInt",
    "PositiveDuration",
    "PositiveInt",
    "PositiveNumber",
    "format_count",
    "format_hours",
    "format_minimum",
    "format_money",
]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _guarded(parse: Callable[[object], float]) -> Callable[[object], float]:
    """``parse`` with overflow (``float(10**400)``) reported as a ValueError like any bad value."""

    def guarded(value: object) -> float:
        try:
            return parse(value)
        except OverflowError:
            raise ValueError(f"{_short(value)} is too large") from None

    return guarded


def _exact_text(
    candidates: list[str], parse: Callable[[object], float], value: float
) -> str | None:
    """The first candidate text that parses back to exactly ``value``."""
    for text in candidates:
        try:
            if parse(text) == value:
                return text
        except ValueError:
            continue
    return None


def _plain(value: float) -> str:
    """``36.0`` → ``'36'``; ``0.1`` → ``'0.1'``."""
    return (
        str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else repr(float(value))
    )


def _number(value: float) -> int | float:
    """``36.0`` → ``36`` (YAML then shows ``36``, not ``36.0``); other values unchanged."""
    return int(value) if float(value).is_integer() and abs(value) < 1e16 else value


# --- counts: 7B, 70e9, 1.5T -------------------------------------------------------------------

_COUNT_SUFFIXES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3))


def format_count(value: float) -> str | int | float:
    """``7e9`` → ``'7B'``; ``1.28e6`` → ``'1.28M'``; ``123.0`` → ``123``."""
    scaled = [
        (_plain(value / scale), suffix) for suffix, scale in _COUNT_SUFFIXES if value >= scale
    ]
    candidates = [
        number + suffix for number, suffix in scaled if len(number) <= 4 and "e" not in number
    ]
    return _exact_text(candidates, parse_count, value) or _number(value)


_COUNT_SCHEMA = {
    "anyOf": [
        {"type": "number", "exclusiveMinimum": 0},
        {
            "type": "string",
            "pattern": r"^\s*[0-9][0-9_,]*(\.[0-9]*)?([eE][+-]?[0-9]+)?\s*[kKmMbBgGtT]?\s*$",
        },
    ],
    "examples": ["7B", "70e9", "1.5T", "25.6M"],
}

Count = Annotated[
    float,
    Field(gt=0),
    BeforeValidator(_guarded(parse_count)),
    PlainSerializer(format_count, when_used="json"),
    WithJsonSchema(_COUNT_SCHEMA),
]
"""A positive quantity written ``7B``, ``70e9``, ``1.5T``, ``350M``, ``12k`` or as a number."""


# --- durations: 36h, 3d, 90m ------------------------------------------------------------------


def format_hours(value: float) -> str | int | float:
    """``36.0`` → ``'36h'``; ``72.0`` → ``'3d'``; ``0.5`` → ``'30m'``; else a number of hours."""
    days, minutes = value / 24, value * 60
    candidates = [f"{_plain(value)}h"]
    if value >= 48 and float(days).is_integer():
        candidates.insert(0, f"{_plain(days)}d")
    if 0 < value < 1 and float(minutes).is_integer():
        candidates.insert(0, f"{_plain(minutes)}m")
    candidates = [text for text in candidates if "e" not in text]
    return _exact_text(candidates, parse_duration_hours, value) or _number(value)


def _duration_schema(bound: str) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", bound: 0, "description": "hours"},
                {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]*)?\s*[a-zA-Z]*\s*$"},
            ],
            "examples": ["36h", "3d", "90m", "1.5h"],
        }
    )


_DURATION_PARSER = BeforeValidator(_guarded(parse_duration_hours))
_HOURS_SERIALIZER = PlainSerializer(format_hours, when_used="json")

Duration = Annotated[
    float, Field(ge=0), _DURATION_PARSER, _HOURS_SERIALIZER, _duration_schema("minimum")
]
"""A duration in hours, written ``36h``, ``3d``, ``90m``, ``2w`` or as a number of hours."""

PositiveDuration = Annotated[
    float, Field(gt=0), _DURATION_PARSER, _HOURS_SERIALIZER, _duration_schema("exclusiveMinimum")
]
"""A duration that must be longer than zero."""


# --- money: $500 ------------------------------------------------------------------------------


def format_money(value: float) -> str | int | float:
    """``500.0`` → ``'$500'``; ``3.5`` → ``'$3.5'``."""
    candidates = [f"${_plain(value)}"] if "e" not in _plain(value) else []
    return _exact_text(candidates, parse_money, value) or _number(value)


Money = Annotated[
    float,
    Field(gt=0),
    BeforeValidator(_guarded(parse_money)),
    PlainSerializer(format_money, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {
                    "type": "string",
                    "pattern": r"^\s*\$?\s*[0-9][0-9_,]*(\.[0-9]*)?\s*[kKmM]?\s*(usd|USD)?\s*$",
                },
            ],
            "examples": ["$500", "1200.50", "$2k"],
        }
    ),
]
"""US dollars, written ``$500``, ``1,200.50``, ``$2k`` or as a number."""


# --- minimums: 8, 8+, 32GB+ ---------------------------------------------------------------------

_TERABYTES = re.compile(r"^\s*([0-9.eE+-]+)\s*(tb|t|tib)\s*(\+?)\s*$", re.IGNORECASE)


def _parse_minimum(value: object) -> Minimum:
    """``8+`` → at least 8; ``16`` → exactly 16; ``32GB+`` → at least 32; ``1TB`` → 1024 (GB)."""
    if isinstance(value, dict) and set(value) == {"value", "at_least"}:  # from model_dump()
        value = f"{value['value']}{'+' if value['at_least'] is True else ''}"
    if isinstance(value, str) and (match := _TERABYTES.match(value)):
        try:
            value = f"{float(match.group(1)) * 1024!r}{match.group(3)}"
        except ValueError:
            raise ValueError(f"expected an amount such as 1TB or 512+, got {value!r}") from None
    try:
        amount = parse_minimum(value)
    except OverflowError:
        raise ValueError(f"{_short(value)} is too large") from None
    if not amount.value > 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return amount


def format_minimum(value: Minimum) -> str | int | float:
    """``Minimum(32, at_least=True)`` → ``'32+'``; ``Minimum(8)`` → ``8``."""
    return _plain(value.value) + "+" if value.at_least else _number(value.value)


MinimumAmount = Annotated[
    Minimum,
    BeforeValidator(_parse_minimum),
    PlainSerializer(format_minimum, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^\s*[0-9.eE+-]+\s*([gG][bB]|[tT][bB]?)?\s*\+?\s*$"},
            ],
            "description": "'8' means exactly 8; '8+' means at least 8 (memory and disk in GB)",
            "examples": [8, "8+", "32GB+"],
        }
    ),
]


# --- whole numbers ------------------------------------------------------------------------------


def _whole_number(value: object) -> object:
    """Accept ``8``, ``8.0`` and ``"8"``; refuse booleans and fractions with a clear message."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int):
        return value
    raise ValueError(f"expected a whole number, got {value!r}")


_LARGEST_INT = 10**15  # beyond any sane node count, batch or sequence length

PositiveInt = Annotated[int, Field(gt=0, le=_LARGEST_INT), BeforeValidator(_whole_number)]
NonNegativeInt = Annotated[int, Field(ge=0, le=_LARGEST_INT), BeforeValidator(_whole_number)]


def _real_number(value: object) -> object:
    """Accept numbers and numeric text; refuse booleans (pydantic would read ``true`` as 1.0)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, int) and abs(value) > 1e300:
        raise ValueError(f"{_short(value)} is too large")
    return value


PositiveNumber = Annotated[
    float,
    Field(gt=0),
    BeforeValidator(_real_number),
    PlainSerializer(_number, when_used="json"),
]
"""A number greater than zero (``90``, ``0.5``)."""
