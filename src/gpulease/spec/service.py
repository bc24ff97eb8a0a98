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

- ``port`` and ``spot`` are always written by ``dump_task`` (``spot: {}`` for the default), so a
  task read back derives neither again (from ``resources.ports`` / ``resources.use_spot``).

Its field types (durations in seconds, ports, counts) are in :mod:`gpulease.spec.serve_fields`.
SkyPilot's spellings (``replica_policy``, ``initial_delay_seconds``, …) are translated before
validation by :mod:`gpulease.spec.skypilot_serve`. Moves no states.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from gpulease.spec.base import SpecModel as _Model
from gpulease.spec.fields import JsonMapping, lowercase
from gpulease.spec.quantities import PositiveNumber
from gpulease.spec.serve_fields import Count, Fraction, Port, PositiveSeconds, Seconds, Step

__all__ = [
    "AutoscaleMetric",
    "AutoscaleSpec",
    "ReadinessProbe",
    "ReplicaRange",
    "ScaleDown",
    "ScaleRule",
    "ScaleUp",
    "ServiceSpec",
    "ServiceSpot",
]

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
    def _always_port_and_spot(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``port`` and ``spot`` are always written (``spot: {}`` for the default mix), so that
        reading the task back derives neither again: not the port from ``resources.ports``, not
        an all-spot mix from ``resources.use_spot``."""
        data: dict[str, Any] = handler(self)
        if isinstance(data, Mapping):
            data = {"port": self.port, **data} if "port" not in data else data
            data.setdefault("spot", {})
        return data
