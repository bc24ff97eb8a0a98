"""Parsing of the human-friendly quantities used in task files and on the command line.

- counts with suffixes: ``7B``, ``70e9``, ``1.5T``, ``350M``, ``12k`` → float
- durations: ``36h``, ``3d``, ``90m``, ``1.5h``, ``2w``, ``45s``, plain numbers are hours → hours
- money: ``$500``, ``500``, ``1,200.50``, ``$2k`` → dollars
- minimums: ``8+`` (at least 8) or ``8`` (exactly 8) → :class:`Minimum`

Each parser raises :class:`ValueError` with a message that says what form is expected; callers add
the field name.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_COUNT_RE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.I)
_DURATION_UNIT_HOURS = {
    "s": 1 / 3600,
    "sec": 1 / 3600,
    "m": 1 / 60,
    "min": 1 / 60,
    "h": 1.0,
    "hr": 1.0,
    "hour": 1.0,
    "hours": 1.0,
    "d": 24.0,
    "day": 24.0,
    "days": 24.0,
    "w": 168.0,
    "week": 168.0,
    "weeks": 168.0,
}
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-z]*)\s*$", re.I)


def _as_float(value: int | float, what: str) -> float:
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{what} is too large") from None


def _finite_non_negative(value: float, what: str) -> float:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{what} must be a finite number")
    if value < 0:
        raise ValueError(f"{what} must not be negative")
    return value


def parse_count(value: object) -> float:
    """``7B`` → 7e9; ``70e9`` → 7e10; ``1.5T`` → 1.5e12; ``12_000`` → 12000."""
    if isinstance(value, bool):
        raise ValueError("expected a number such as 7B, 70e9 or 1.5T, got a boolean")
    if isinstance(value, int | float):
        return _finite_non_negative(_as_float(value, "the number"), "the number")
    if not isinstance(value, str):
        raise ValueError(f"expected a number such as 7B, 70e9 or 1.5T, got {type(value).__name__}")
    match = _COUNT_RE.match(value)
    if not match:
        raise ValueError(f"expected a number such as 7B, 70e9 or 1.5T, got {value!r}")
    number = float(match.group(1).replace("_", "").replace(",", ""))
    return _finite_non_negative(number * _COUNT_SUFFIX[match.group(2).lower()], "the number")


def parse_duration_hours(value: object) -> float:
    """``36h`` → 36.0; ``3d`` → 72.0; ``90m`` → 1.5; a plain number is hours."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 36h or 3d, got a boolean")
    if isinstance(value, int | float):
        return _finite_non_negative(_as_float(value, "the duration"), "the duration")
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 36h or 3d, got {type(value).__name__}")
    match = _DURATION_RE.match(value)
    unit = match.group(2).lower() if match else ""
    if not match or (unit not in _DURATION_UNIT_HOURS and unit != ""):
        raise ValueError(f"expected a duration such as 36h, 90m or 3d, got {value!r}")
    hours = float(match.group(1)) * _DURATION_UNIT_HOURS.get(unit, 1.0)
    return _finite_non_negative(hours, "the duration")


def parse_money(value: object) -> float:
    """``$500`` → 500.0; ``1,200.50`` → 1200.5; ``$2k`` → 2000.0."""
    if isinstance(value, bool):
        raise ValueError("expected an amount such as $500, got a boolean")
    if isinstance(value, int | float):
        return _finite_non_negative(_as_float(value, "the amount"), "the amount")
    if not isinstance(value, str):
        raise ValueError(f"expected an amount such as $500, got {type(value).__name__}")
    text = value.strip()
    if text.lower().endswith("usd"):
        text = text[:-3].strip()
    text = text.removeprefix("$").strip()
    try:
        return parse_count(text)
    except ValueError:
        raise ValueError(f"expected an amount such as $500 or 1200.50, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class Minimum:
    """A resource amount: ``8+`` means at least 8, ``8`` means exactly 8."""

    value: float
    at_least: bool = False

    def admits(self, amount: float) -> bool:
        return amount >= self.value if self.at_least else amount == self.value

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return number + ("+" if self.at_least else "")


def parse_minimum(value: object) -> Minimum:
    """``8+`` → Minimum(8, at_least=True); ``16`` → Minimum(16)."""
    if isinstance(value, Minimum):
        return value
    if isinstance(value, bool):
        raise ValueError("expected an amount such as 8 or 8+, got a boolean")
    if isinstance(value, int | float):
        return Minimum(_finite_non_negative(_as_float(value, "the amount"), "the amount"))
    if not isinstance(value, str):
        raise ValueError(f"expected an amount such as 8 or 8+, got {type(value).__name__}")
    text = value.strip()
    at_least = text.endswith("+")
    text = text.removesuffix("+").strip()
    if text.lower().endswith("gb"):
        text = text[:-2].strip()
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"expected an amount such as 8 or 8+, got {value!r}") from None
    return Minimum(_finite_non_negative(number, "the amount"), at_least)
