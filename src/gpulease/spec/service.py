"""The ``service:`` section of a task: how replicas are probed, how many run, how they scale.

CONTRACT (read by ``gpulease.serve`` — the autoscaler's ``AutoscalePolicy.from_spec`` — and by the
services loop; keep names and types stable):

- :class:`ServiceSpec`: ``port`` (what replicas listen on, 1..65535), ``readiness_probe``
  (:class:`ReadinessProbe`), ``replicas`` (:class:`ReplicaRange`), ``autoscale``
  (:class:`AutoscaleSpec` or None: fixed at ``replicas.min``), ``spot`` (:class:`ServiceSpot`).
- Durations are seconds (``*_s`` floats), written ``20s``, ``5m``, ``1h`` or as a number of
  seconds. ``ReplicaRange.max`` is always filled in after validation (``max(min, 1)`` when not
  given), so readers never see None from a validated task.
- ``replicas: {min, max}`` with ``max > min`` and no ``autoscale:`` autoscales with the default
  rule (:class:`AutoscaleSpec()`), so ``autoscale`` is None only for a fixed count.

Also owns :data:`Seconds` / :data:`PositiveSeconds` (durations in seconds) and :data:`PortList`
(``resources.ports``: ``8080``, ``"8000-8010"`` or a list). SkyPilot's spellings
(``replica_policy``, ``initial_delay_seconds``, …) are translated before validation by
:mod:`gpulease.spec.skypilot_serve`. Moves no states.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)

from gpulease.spec.base import SpecModel as _Model
from gpulease.spec.fields import JsonMapping, lowercase
from gpulease.spec.quantities import PositiveNumber, _whole_number

__all__ = [
    "AutoscaleMetric",
    "AutoscaleSpec",
    "Count",
    "PortList",
    "PositiveSeconds",
    "ReadinessProbe",
    "ReplicaRange",
    "ScaleDown",
    "ScaleRule",
    "ScaleUp",
    "Seconds",
    "ServiceSpec",
    "ServiceSpot",
    "Step",
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


# --- the models ----------------------------------------------------------------------------------


def _probe(value: object) -> object:
    """``readiness_probe: /health`` is short for ``{path: /health}``."""
    return {"path": value} if isinstance(value, str) else value


def _post_data(value: object) -> object:
    """SkyPilot also takes the body as JSON text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise ValueError("expected a mapping or JSON text of one, got other text") from None


class ReadinessProbe(_Model):
    """How a replica is checked before it gets traffic: GET (or POST post_data to) path."""

    path: str = "/"
    """The path probed on the replica's port; it must answer 200."""
    initial_delay_s: Seconds = Field(default=1200.0, alias="initial_delay")
    """Probe failures are not counted for this long after the replica starts: 20s, 20m."""
    timeout_s: PositiveSeconds = Field(default=15.0, alias="timeout")
    """A probe slower than this fails: 5s."""
    post_data: Annotated[JsonMapping, BeforeValidator(_post_data)] | None = None
    """Probe with POST and this JSON body (a mapping) instead of GET."""

    @field_validator("path")
    @classmethod
    def _absolute(cls, path: str) -> str:
        if not path.startswith("/"):
            raise ValueError(f"must start with '/', got {path!r}")
        return path


def _replicas(value: object) -> object:
    """``replicas: 2`` is short for ``{min: 2, max: 2}``."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return {"min": value, "max": value}
    return value


class ReplicaRange(_Model):
    """How many replicas may run: at least min, at most max."""

    min: Count = 1
    """Fewest replicas (0: scale to zero when idle)."""
    max: Count | None = None
    """Most replicas (at least min and at least 1); unset: the larger of min and 1."""

    @field_validator("max")
    @classmethod
    def _at_least_min(cls, value: int | None, info: ValidationInfo) -> int | None:
        low = info.data.get("min", 1)
        if value is not None and value < max(low, 1):
            raise ValueError(f"must be at least min ({low}) and at least 1, got {value}")
        return value

    @model_validator(mode="after")
    def _fill_max(self) -> Self:
        if self.max is None:
            object.__setattr__(self, "max", max(self.min, 1))
        return self


class ScaleRule(_Model):
    """One direction of scaling: when the metric per replica ÷ target stays past threshold for
    for_s seconds, change the replica count by step."""

    threshold: PositiveNumber
    """The load (metric per replica ÷ target_per_replica) that triggers the rule."""
    step: Step
    """Replicas added or removed at a time."""
    for_s: Seconds
    """How long the load must stay past the threshold: 60s."""


class ScaleUp(ScaleRule):
    """``up: {above, add, for}``: add replicas while the load stays above the threshold."""

    threshold: PositiveNumber = Field(default=0.8, alias="above")
    """Add replicas when the load stays above this (0.8: 80 % of the target)."""
    step: Step = Field(default=2, alias="add")
    """Replicas added at a time."""
    for_s: Seconds = Field(default=60.0, alias="for")
    """How long the load must stay above the threshold: 60s."""


class ScaleDown(ScaleRule):
    """``down: {below, remove, for}``: remove replicas while the load stays below the threshold."""

    threshold: PositiveNumber = Field(default=0.3, alias="below")
    """Remove replicas when the load stays below this (0.3: 30 % of the target)."""
    step: Step = Field(default=1, alias="remove")
    """Replicas removed at a time."""
    for_s: Seconds = Field(default=300.0, alias="for")
    """How long the load must stay below the threshold: 5m."""


AutoscaleMetric = Literal["load", "qps", "latency_p95", "gpu_utilisation"]
_METRIC_SPELLINGS = {"gpu_utilization": "gpu_utilisation", "in_flight": "load", "rps": "qps"}


def _metric(value: object) -> object:
    value = lowercase(value)
    return _METRIC_SPELLINGS.get(value, value) if isinstance(value, str) else value


def _rule_data(value: object) -> object:
    """Accept any :class:`ScaleRule` (by attribute names) where an up or down rule goes."""
    if isinstance(value, ScaleRule) and not isinstance(value, ScaleUp | ScaleDown):
        return value.model_dump()
    return value


class AutoscaleSpec(_Model):
    """When to add and remove replicas (the defaults follow the rule: add 2 after 60 s above
    80 % of the target, remove 1 after 5 min below 30 %)."""

    metric: Annotated[AutoscaleMetric, BeforeValidator(_metric)] = "load"
    """What is measured per replica: load (requests in flight), qps (requests per second),
    latency_p95 (seconds) or gpu_utilisation (percent)."""
    target_per_replica: PositiveNumber = 8.0
    """The metric's value one replica is sized for (8 requests in flight; with qps: requests
    per second)."""
    up: Annotated[ScaleUp, BeforeValidator(_rule_data)] = ScaleUp()
    """Scale up: {above: 0.8, add: 2, for: 60s}."""
    down: Annotated[ScaleDown, BeforeValidator(_rule_data)] = ScaleDown()
    """Scale down: {below: 0.3, remove: 1, for: 5m}."""
    cooldown_s: Seconds = Field(default=60.0, alias="cooldown")
    """After any scaling action, no other for this long: 60s."""

    @field_validator("down")
    @classmethod
    def _below_up(cls, down: ScaleDown, info: ValidationInfo) -> ScaleDown:
        up = info.data.get("up")
        if isinstance(up, ScaleRule) and down.threshold >= up.threshold:
            raise ValueError(
                f"below ({down.threshold:g}) must be lower than up.above ({up.threshold:g}), "
                "else the service would flap"
            )
        return down


class ServiceSpot(_Model):
    """The spot / on-demand mix of the replicas; spot replicas lost to preemption or a lack of
    capacity are replaced on-demand while spot stays unavailable."""

    on_demand_base: Count = 1
    """Replicas always on on-demand capacity (the first ones)."""
    spot_share: Fraction = 0.0
    """Share (0..1) of the replicas above the base that run on spot."""


class ServiceSpec(_Model):
    """A task with this section is a service: replicas run its run: command and listen on port;
    the gpulease server balances requests over the ready ones and scales them by load."""

    port: Port = 8080
    """The port replicas listen on (they also read $PORT, which the provider may change)."""
    readiness_probe: Annotated[ReadinessProbe, BeforeValidator(_probe)] = ReadinessProbe()
    """A path ('/health') or {path, initial_delay, timeout, post_data}."""
    replicas: Annotated[ReplicaRange, BeforeValidator(_replicas)] = ReplicaRange()
    """How many replicas: 2 (fixed) or {min: 1, max: 8}."""
    autoscale: AutoscaleSpec | None = None
    """How replicas scale between min and max; unset: fixed at replicas.min (with min < max:
    the default rule)."""
    spot: ServiceSpot = ServiceSpot()
    """{on_demand_base: 1, spot_share: 0.75}: the base on on-demand, a share of the rest on
    spot."""

    @model_validator(mode="after")
    def _autoscale_when_ranged(self) -> Self:
        if self.autoscale is None and (self.replicas.max or 0) > self.replicas.min:
            object.__setattr__(self, "autoscale", AutoscaleSpec())
        return self

    @model_serializer(mode="wrap")
    def _always_port(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``port`` is always written: a task's ``resources.ports`` must not replace it when the
        task is read back."""
        data: dict[str, Any] = handler(self)
        if isinstance(data, Mapping) and "port" not in data:
            data = {"port": self.port, **data}
        return data
