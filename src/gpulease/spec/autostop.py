"""``resources.autostop``: when an idle cluster is stopped (or torn down), in SkyPilot's forms
plus gpulease's load rule.

Accepted forms (SkyPilot's, https://docs.skypilot.co/en/latest/reference/auto-stop.html):

- ``autostop: true`` — stop after the default 5 idle minutes; ``autostop: false`` (or ``-1``) —
  no autostop;
- ``autostop: 10`` (idle minutes) or ``autostop: 10m`` / ``1h`` (a duration, whole minutes);
- ``autostop: {idle_minutes: 10, down: true}`` (``idle_minutes`` defaults to 5).

gpulease adds ``gpu_utilisation_below: PCT`` (also spelled ``gpu_utilization_below``) to the
mapping: a running cluster whose GPUs all stay below PCT % for the idle minutes while billed is
stopped too, not only one whose task has ended. SkyPilot's ``wait_for``, ``hook`` and
``hook_timeout`` are dropped with a warning by :mod:`gpulease.spec.normalize`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from gpulease.spec.base import SpecModel
from gpulease.spec.quantities import NonNegativeInt
from gpulease.units import parse_duration_hours

__all__ = ["DEFAULT_IDLE_MINUTES", "AutostopField", "AutostopSpec"]

DEFAULT_IDLE_MINUTES = 5
"""SkyPilot's default: ``autostop: true`` stops after 5 idle minutes."""

_GPU_SPELLINGS = ("gpu_utilisation_below", "gpu_utilization_below")


class AutostopSpec(SpecModel):
    """Stop (or tear down) the cluster once it has been idle for ``idle_minutes``."""

    idle_minutes: NonNegativeInt = DEFAULT_IDLE_MINUTES
    """Idle minutes before the cluster is stopped: after its task ended, or (with
    gpu_utilisation_below) while its GPUs stay below the threshold."""
    down: bool = False
    """Terminate instead of stopping (SkyPilot's autodown)."""
    gpu_utilisation_below: Annotated[float, Field(gt=0.0, le=100.0)] | None = None
    """Also stop a running cluster whose GPUs all stay below this utilisation (percent, e.g. 5)
    for idle_minutes while billed; a gpulease.train job that makes progress is never idle.
    Also spelled gpu_utilization_below."""


def _minutes_of(text: str) -> int:
    """``"10"`` → 10; ``"10m"`` → 10; ``"1h"`` → 60; fractions of a minute are refused."""
    stripped = text.strip()
    try:
        minutes = float(stripped)  # a bare number is minutes, as in SkyPilot
    except ValueError:
        minutes = parse_duration_hours(stripped) * 60.0
    if minutes < 0 or not float(round(minutes, 9)).is_integer():
        raise ValueError(f"{text!r} is not a whole number of minutes (write 10, 10m or 1h)")
    return round(minutes)


def _gpu_spelling(data: Mapping[Any, Any]) -> dict[Any, Any]:
    given = [key for key in _GPU_SPELLINGS if key in data]
    if len(given) > 1:
        raise ValueError("give gpu_utilisation_below or gpu_utilization_below, not both")
    out = dict(data)
    if given == ["gpu_utilization_below"]:
        out["gpu_utilisation_below"] = out.pop("gpu_utilization_below")
    return out


def parse_autostop(value: object) -> object:
    """Any of the accepted forms → the mapping of :class:`AutostopSpec`, or None (no autostop).
    Other values pass through for pydantic to refuse with the field's name."""
    if value is None or isinstance(value, AutostopSpec):
        return value
    if isinstance(value, bool):
        return {} if value else None
    if isinstance(value, int):
        return None if value == -1 else {"idle_minutes": value}  # -1: off, as SkyPilot's -i -1
    if isinstance(value, str):
        return {"idle_minutes": _minutes_of(value)}
    if isinstance(value, Mapping):
        return _gpu_spelling(value)
    raise ValueError(
        f"expected true, false, idle minutes (10, 10m) or {{idle_minutes, down, "
        f"gpu_utilisation_below}}, got {value!r}"
    )


_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "boolean", "description": "true: stop after 5 idle minutes; false: never."},
        {"type": "integer", "minimum": 0, "description": "idle minutes"},
        {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]*)?\s*[a-zA-Z]*\s*$"},
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "idle_minutes": {"type": "integer", "minimum": 0, "default": 5},
                "down": {"type": "boolean", "default": False},
                "gpu_utilisation_below": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": 100,
                    "description": "percent: also stop a running cluster whose GPUs stay "
                    "below it for idle_minutes",
                },
                "gpu_utilization_below": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": 100,
                    "description": "same as gpu_utilisation_below",
                },
                "wait_for": {
                    "type": "string",
                    "description": "SkyPilot compatibility: ignored with a warning.",
                },
                "hook": {
                    "type": "string",
                    "description": "SkyPilot compatibility: ignored with a warning.",
                },
                "hook_timeout": {
                    "type": "integer",
                    "description": "SkyPilot compatibility: ignored with a warning.",
                },
            },
        },
    ],
    "description": "Stop (or with down: tear down) the cluster after idle minutes: true (5 "
    "min), false, 10, 10m, or {idle_minutes, down, gpu_utilisation_below}.",
    "examples": [True, 10, "30m", {"idle_minutes": 30, "gpu_utilisation_below": 5}],
}

AutostopField = Annotated[
    AutostopSpec | None, BeforeValidator(parse_autostop), WithJsonSchema(_SCHEMA)
]
"""``resources.autostop`` in any accepted form; None when absent or ``false``."""
