"""The service document a ``services`` row carries in its ``task`` JSON column, and the settings
the services loop reads from it.

``services.task`` holds ``{"version": 1, "spec": {...}, "run": {...}, "service": {...},
"settings": {...}, "policy": {...} | null, "spot": [targets], "on_demand": [targets]}``: the
normalised task as the user wrote it (views only), the typed :class:`~gpulease.wire.RunSpec`
every replica runs, the task's ``service:`` section as the spec dumped it (views only), the
:class:`ServiceSettings` the loop follows (built by the server from the spec's ``ServiceSpec``),
the autoscaler's policy as a plain mapping (the fields of ``serve.autoscale.AutoscalePolicy``;
None: the replica count stays at ``replicas.min``) and the ranked spot and on-demand launch
targets of one replica. ``serve update`` writes a new document and bumps ``services.version``;
each replica cluster keeps the launch document it was created with. Pure; moves no states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gpulease.state import LaunchTarget
from gpulease.wire import RunSpec

SERVICE_DOCUMENT_VERSION = 1


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """What the loop follows: the replicas' port (``$PORT`` where the provider keeps it), the
    readiness probe, the replica range and the spot mix (``on_demand_base`` replicas on
    on-demand, ``spot_share`` of the rest on spot)."""

    port: int = 8080
    probe_path: str = "/"
    probe_initial_delay_s: float = 1200.0
    probe_timeout_s: float = 15.0
    probe_post_data: dict[str, Any] | None = None
    min_replicas: int = 1
    max_replicas: int = 1
    on_demand_base: int = 1
    spot_share: float = 0.0

    @classmethod
    def from_service_spec(cls, service: Mapping[str, Any]) -> ServiceSettings:
        """From the spec's ``ServiceSpec`` dumped by field name (``model_dump()``: durations
        as seconds)."""
        probe = service.get("readiness_probe") or {}
        replicas = service.get("replicas") or {}
        spot = service.get("spot") or {}
        low = int(replicas.get("min", 1))
        high = replicas.get("max")
        return cls(
            port=int(service.get("port", 8080)),
            probe_path=str(probe.get("path", "/")),
            probe_initial_delay_s=float(probe.get("initial_delay_s", 1200.0)),
            probe_timeout_s=float(probe.get("timeout_s", 15.0)),
            probe_post_data=probe.get("post_data"),
            min_replicas=low,
            max_replicas=max(low, int(high)) if high is not None else max(low, 1),
            on_demand_base=int(spot.get("on_demand_base", 1)),
            spot_share=float(spot.get("spot_share", 0.0)),
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceSettings:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def clamp(self, replicas: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, replicas))

    def mix(self, replicas: int, *, spot_available: bool = True) -> tuple[int, int]:
        """``(on_demand, spot)`` for ``replicas`` replicas: the base on on-demand, ``spot_share``
        of the rest on spot (rounded down), everything on-demand while spot is unavailable."""
        if not spot_available:
            return replicas, 0
        base = min(replicas, self.on_demand_base)
        spot = math.floor((replicas - base) * self.spot_share + 1e-9)
        return replicas - spot, spot


@dataclass(frozen=True, slots=True)
class ServiceDocument:
    run: RunSpec
    settings: ServiceSettings
    spec: Mapping[str, Any] = field(default_factory=dict)
    service: Mapping[str, Any] = field(default_factory=dict)
    policy: Mapping[str, Any] | None = None
    spot: tuple[LaunchTarget, ...] = ()
    on_demand: tuple[LaunchTarget, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "version": SERVICE_DOCUMENT_VERSION,
            "spec": dict(self.spec),
            "run": self.run.model_dump(mode="json"),
            "service": dict(self.service),
            "settings": asdict(self.settings),
            "policy": dict(self.policy) if self.policy is not None else None,
            "spot": [asdict(t) for t in self.spot],
            "on_demand": [asdict(t) for t in self.on_demand],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ServiceDocument:
        policy = data.get("policy")
        return cls(
            run=RunSpec.model_validate(data.get("run") or {}),
            settings=ServiceSettings.from_json(data.get("settings") or {}),
            spec=dict(data.get("spec") or {}),
            service=dict(data.get("service") or {}),
            policy=dict(policy) if policy is not None else None,
            spot=tuple(LaunchTarget(**t) for t in data.get("spot") or []),
            on_demand=tuple(LaunchTarget(**t) for t in data.get("on_demand") or []),
        )

    def targets(self, spot: bool) -> tuple[LaunchTarget, ...]:
        """A replica's targets: spot ones for a spot replica (on-demand when there is none)."""
        if spot and self.spot:
            return self.spot
        return self.on_demand or self.spot

    @property
    def providers(self) -> frozenset[str]:
        return frozenset(t.provider for t in (*self.spot, *self.on_demand))
