"""Shared rendering helpers: the Rich console, JSON output, money/hours formatting."""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def console(stderr: bool = False) -> Console:
    """A Rich console; when output is not a terminal, wide enough for every table column."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 160
    return Console(stderr=stderr, highlight=False, soft_wrap=False, width=width)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def money(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "—"
    return f"${value:,.{digits}f}"


def hours(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "—"
    if value >= 48:
        return f"{value / 24:.1f} d"
    return f"{value:.1f} h" if value >= 1 else f"{value * 60:.0f} min"
