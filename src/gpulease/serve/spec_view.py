"""What the autoscaler reads of a spec's ``service:`` section, and how it maps onto
:class:`gpulease.serve.autoscale.AutoscalePolicy` fields (and back onto YAML names for errors).

The protocols name the fields of ``spec.ServiceSpec`` (issue 17's contract, section 1) as
read-only properties, so the real pydantic model satisfies them structurally and this package
needs no import of ``spec``. Pure; moves no state.

- ``replicas: {min, max}``: ``max`` absent means ``min`` (at least 1, so a ``min: 0`` service can
  wake from zero).
- ``autoscale`` absent: the service stays at ``replicas.min`` (between 0 and 1 for ``min: 0``,
  woken by a request and put back to zero by ``down.for`` without traffic); the other rules take
  the spec's defaults.
"""

from __future__ import annotations

from typing import Any, Protocol


class ReplicaRangeLike(Protocol):
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int | None: ...


class ScaleRuleLike(Protocol):
    @property
    def threshold(self) -> float: ...
    @property
    def step(self) -> int: ...
    @property
    def for_s(self) -> float: ...


class AutoscaleSpecLike(Protocol):
    @property
    def metric(self) -> str: ...
    @property
    def target_per_replica(self) -> float: ...
    @property
    def up(self) -> ScaleRuleLike: ...
    @property
    def down(self) -> ScaleRuleLike: ...
    @property
    def cooldown_s(self) -> float: ...


class ServiceSpotLike(Protocol):
    @property
    def on_demand_base(self) -> int: ...
    @property
    def spot_share(self) -> float: ...


class ServiceLike(Protocol):
    """``spec.ServiceSpec`` as the autoscaler reads it."""

    @property
    def replicas(self) -> ReplicaRangeLike: ...
    @property
    def autoscale(self) -> AutoscaleSpecLike | None: ...
    @property
    def spot(self) -> ServiceSpotLike: ...


# AutoscalePolicy field → the YAML field of a service file it comes from
YAML_FIELDS = {
    "min_replicas": "service.replicas.min",
    "max_replicas": "service.replicas.max",
    "metric": "service.autoscale.metric",
    "target_per_replica": "service.autoscale.target_per_replica",
    "up_above": "service.autoscale.up.above",
    "up_add": "service.autoscale.up.add",
    "up_for_s": "service.autoscale.up.for",
    "down_below": "service.autoscale.down.below",
    "down_remove": "service.autoscale.down.remove",
    "down_for_s": "service.autoscale.down.for",
    "cooldown_s": "service.autoscale.cooldown",
    "on_demand_base": "service.spot.on_demand_base",
    "spot_share": "service.spot.spot_share",
}


def yaml_field(policy_field: str) -> str:
    """The YAML name of a policy field, for an error message."""
    return YAML_FIELDS.get(policy_field, f"service.{policy_field}")


def policy_fields(service: ServiceLike) -> dict[str, Any]:
    """The keyword arguments of ``AutoscalePolicy`` for ``service``."""
    low = service.replicas.min
    high = service.replicas.max if service.replicas.max is not None else max(low, 1)
    values: dict[str, Any] = {
        "min_replicas": low,
        "on_demand_base": service.spot.on_demand_base,
        "spot_share": service.spot.spot_share,
    }
    scale = service.autoscale
    if scale is None:
        return {**values, "max_replicas": max(low, 1)}
    return {
        **values,
        "max_replicas": high,
        "metric": scale.metric,
        "target_per_replica": scale.target_per_replica,
        "up_above": scale.up.threshold,
        "up_add": scale.up.step,
        "up_for_s": scale.up.for_s,
        "down_below": scale.down.threshold,
        "down_remove": scale.down.step,
        "down_for_s": scale.down.for_s,
        "cooldown_s": scale.cooldown_s,
    }
