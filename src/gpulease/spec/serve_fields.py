"""Field types of the ``service:`` and ``pool:`` sections: durations in seconds, ports, counts.

Like :mod:`gpulease.spec.quantities`, each type is an ``Annotated`` pydantic type: a parser that
accepts what a user writes (``20s``, ``5m``, ``1h`` or a number of seconds; ``8080``,
``"8000-8010"`` or a list of ports), a serializer used only in JSON mode that writes it back in
that form (``parse(format(x)) == x``), and the JSON Schema of the user-facing form. Parsers raise
:class:`ValueError` (the loader adds the field path and line). Moves no states.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator, Field, PlainSerializer, WithJsonSchema

from gpulease.spec.quantities import _whole_number

__all__ = [
    "MAX_REPLICAS",
    "Count",
    "Fraction",
    "Port",
    "PortList",
    "PositiveSeconds",
    "Seconds",
    "Step",
    "format_ports",
    "format_seconds",
    "parse_ports",
    "parse_seconds",
]

MAX_REPLICAS = 1000
"""The most replicas (or pool nodes) one service may ask for."""

# --- durations in seconds: 20s, 5m, 1h -----------------------------------------------------------

_SECONDS_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
_UNIT_SECONDS = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_LARGEST_SECONDS = 1e12  # beyond any sane delay (30,000 years)


def parse_seconds(value: object) -> float:
    """``20s`` → 20.0; ``5m`` → 300.0; ``1h`` → 3600.0; a plain number is seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 20s, 5m or 1h, got {value!r}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError("the duration is too large") from None
    elif isinstance(value, str) and (match := _SECONDS_RE.match(value)):
        unit = match.group(2).lower()
        if unit not in _UNIT_SECONDS:
            raise ValueError(f"unknown unit {match.group(2)!r} in {value!r}; use s, m, h or d")
        seconds = float(match.group(1)) * _UNIT_SECONDS[unit]
    else:
        raise ValueError(f"expected a duration such as 20s, 5m or 1h, got {value!r}")
    if math.isnan(seconds) or seconds < 0:
        raise ValueError(f"a duration must not be negative, got {value!r}")
    if seconds > _LARGEST_SECONDS:
        raise ValueError(f"the duration {value!r} is too large")
    return seconds


def format_seconds(value: float) -> str | int | float:
    """``3600.0`` → ``'1h'``; ``300.0`` → ``'5m'``; ``20.0`` → ``'20s'``; else the number."""
    if not float(value).is_integer():
        return value
    whole = int(value)
    for unit, size in (("h", 3600), ("m", 60)):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def _seconds_schema(bound: str) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", bound: 0, "description": "seconds"},
                {"type": "string", "pattern": r"^\s*[0-9.]+\s*[a-zA-Z]*\s*$"},
            ],
            "examples": ["20s", "5m", "1h", 30],
        }
    )


_SECONDS_PARSER = BeforeValidator(parse_seconds)
_SECONDS_SERIALIZER = PlainSerializer(format_seconds, when_used="json")

Seconds = Annotated[
    float, Field(ge=0), _SECONDS_PARSER, _SECONDS_SERIALIZER, _seconds_schema("minimum")
]
"""A duration in seconds, written ``20s``, ``5m``, ``1h``, ``1d`` or as a number of seconds."""

PositiveSeconds = Annotated[
    float, Field(gt=0), _SECONDS_PARSER, _SECONDS_SERIALIZER, _seconds_schema("exclusiveMinimum")
]
"""A duration in seconds that must be longer than zero."""


# --- ports: 8080, "8000-8010", [8080, 8081] ------------------------------------------------------

_PORT_RANGE = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")


def _port(value: int, text: object) -> int:
    if not 1 <= value <= 65535:
        raise ValueError(f"port {text!r} is out of range; ports are 1..65535")
    return value


def _port_item(item: object) -> list[int]:
    if isinstance(item, int) and not isinstance(item, bool):
        return [_port(item, item)]
    if isinstance(item, str) and (match := _PORT_RANGE.match(item)):
        low = _port(int(match.group(1)), item)
        high = _port(int(match.group(2)), item) if match.group(2) else low
        if high < low:
            raise ValueError(f"port range {item!r} ends before it starts")
        return list(range(low, high + 1))
    raise ValueError(f"expected a port such as 8080 or a range such as 8000-8010, got {item!r}")


def parse_ports(value: object) -> list[int]:
    """``8080`` → [8080]; ``"8000-8002"`` → [8000, 8001, 8002]; a list of those, each port once
    in the order given."""
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    ports: dict[int, None] = {}
    for index, item in enumerate(items):
        try:
            ports.update(dict.fromkeys(_port_item(item)))
        except ValueError as exc:
            raise ValueError(f"item {index + 1}: {exc}" if len(items) > 1 else str(exc)) from None
    return list(ports)


def format_ports(ports: list[int]) -> list[int | str]:
    """Runs of consecutive ports written as ranges: [8000, 8001, 8002, 9000] → ['8000-8002',
    9000]."""
    out: list[int | str] = []
    start = 0
    for index in range(1, len(ports) + 1):
        if index == len(ports) or ports[index] != ports[index - 1] + 1:
            low, high = ports[start], ports[index - 1]
            out.append(low if low == high else f"{low}-{high}")
            start = index
    return out


PortList = Annotated[
    list[int],
    BeforeValidator(parse_ports),
    PlainSerializer(format_ports, when_used="json"),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "maximum": 65535},
                {"type": "string", "pattern": r"^\s*[0-9]+\s*(-\s*[0-9]+\s*)?$"},
                {
                    "type": "array",
                    "items": {
                        "anyOf": [
                            {"type": "integer", "minimum": 1, "maximum": 65535},
                            {"type": "string", "pattern": r"^\s*[0-9]+\s*(-\s*[0-9]+\s*)?$"},
                        ]
                    },
                },
            ],
            "examples": [8080, "8000-8010", [8080, "9000-9002"]],
        }
    ),
]
"""Ports, each once: ``8080``, ``"8080"``, ``"8000-8010"`` or a list of those."""


def _port_number(value: object) -> object:
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"expected a port number (1..65535), got {value!r}")
    return int(value) if isinstance(value, float) else value


def _no_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    return value


Port = Annotated[int, Field(ge=1, le=65535), BeforeValidator(_port_number)]
Count = Annotated[int, Field(ge=0, le=MAX_REPLICAS), BeforeValidator(_whole_number)]
"""A number of replicas or nodes: 0..MAX_REPLICAS."""
Step = Annotated[int, Field(ge=1, le=MAX_REPLICAS), BeforeValidator(_whole_number)]
"""Replicas added or removed at a time: 1..MAX_REPLICAS."""
Fraction = Annotated[float, Field(ge=0.0, le=1.0), BeforeValidator(_no_bool)]
