"""The launch document of a managed job (``jobs.task`` JSON) and the choice of an attempt's
targets from it.

``{"version": 2, "spec": {...}, "run": {...}, "task_id": ..., "checkpoint": {...}, "spot":
[targets], "on_demand": [targets], "policy": {...}}``: the normalised task spec (for the server's
views; the controller never reads it), the typed :class:`~gpulease.wire.RunSpec` every attempt
runs, the agent task id every attempt shares, the resolved
:class:`~gpulease.wire.CheckpointSync`, the ranked spot and on-demand launch targets the
optimizer found, and the job's policy settings (:class:`JobPolicy`: recovery strategy, restarts,
zone cool-down, deadline, budget, expected run time, spot price limits); ``"pool"`` (optional):
the pool whose nodes the job runs on (``resources.pool``; its targets are then the pool's).

:func:`attempt_targets` orders the targets of one pricing mode for the next attempt: targets in
a zone still cooling down after a preemption are left out; ``same_region`` puts the last region
first, ``next_region`` puts it last; a spot target whose current price is above the job's limit
is left out. Pure; moves no states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpulease.state import LaunchTarget
from gpulease.wire import CheckpointSync, RunSpec

JOB_DOCUMENT_VERSION = 2
STRATEGIES = ("same_region", "next_region", "on_demand_fallback")


@dataclass(frozen=True, slots=True)
class JobPolicy:
    """What a job's recovery and spot decisions follow (times in seconds of the job's clock).

    ``use_spot``: ``"true"``, ``"false"`` or ``"auto"``; ``job_s``: the expected run time (the
    spot policy's ``C``; None when the task has no workload to estimate it from); ``gap_s``: how
    often the spot policy is asked again; ``max_spot_price``: $/h for the whole attempt (already
    multiplied by the node count); ``spot_price_ratio``: a fraction of the on-demand price."""

    use_spot: str = "false"
    strategy: str = "next_region"
    max_restarts_on_errors: int = 0
    zone_cooldown_s: float = 1800.0
    deadline_s: float | None = None
    budget_usd: float | None = None
    job_s: float | None = None
    changeover_s: float = 600.0
    gap_s: float = 600.0
    max_spot_price: float | None = None
    spot_price_ratio: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobPolicy:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True, slots=True)
class JobDocument:
    run: RunSpec
    task_id: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    spot: tuple[LaunchTarget, ...] = ()
    on_demand: tuple[LaunchTarget, ...] = ()
    policy: JobPolicy = field(default_factory=JobPolicy)
    checkpoint: CheckpointSync | None = None
    pool: str | None = None  # ``resources.pool``: the job runs on a node of this pool

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "version": JOB_DOCUMENT_VERSION,
            "spec": dict(self.spec),
            "run": self.run.model_dump(mode="json"),
            "task_id": self.task_id,
            "checkpoint": self.checkpoint.model_dump(mode="json") if self.checkpoint else None,
            "spot": [asdict(t) for t in self.spot],
            "on_demand": [asdict(t) for t in self.on_demand],
            "policy": asdict(self.policy),
        }
        if self.pool is not None:
            data["pool"] = self.pool
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobDocument:
        checkpoint = data.get("checkpoint")
        return cls(
            run=RunSpec.model_validate(data.get("run") or {}),
            task_id=str(data["task_id"]),
            spec=dict(data.get("spec") or {}),
            spot=tuple(LaunchTarget(**t) for t in data.get("spot") or []),
            on_demand=tuple(LaunchTarget(**t) for t in data.get("on_demand") or []),
            policy=JobPolicy.from_json(data.get("policy") or {}),
            checkpoint=CheckpointSync.model_validate(checkpoint) if checkpoint else None,
            pool=data.get("pool") or None,
        )

    def targets(self, pricing: str) -> tuple[LaunchTarget, ...]:
        return self.spot if pricing == "spot" else self.on_demand

    @property
    def providers(self) -> frozenset[str]:
        return frozenset(t.provider for t in (*self.spot, *self.on_demand))

    @property
    def on_demand_price(self) -> float | None:
        """The cheapest on-demand price per hour (whole attempt): the report's yardstick."""
        prices = [t.price_per_hour for t in self.on_demand if t.price_per_hour is not None]
        return min(prices) if prices else None

    def spot_limit(self, target: LaunchTarget) -> float | None:
        """The highest spot price per hour the job accepts on ``target``, if it set one."""
        limits: list[float] = []
        if self.policy.max_spot_price is not None:
            limits.append(self.policy.max_spot_price)
        od = self._on_demand_like(target)
        if self.policy.spot_price_ratio is not None and od is not None:
            limits.append(self.policy.spot_price_ratio * od)
        return min(limits) if limits else None

    def _on_demand_like(self, target: LaunchTarget) -> float | None:
        """The on-demand price of the same instance in the same region, else the cheapest."""
        for t in self.on_demand:
            same = (t.provider, t.region, t.instance_type) == (
                target.provider,
                target.region,
                target.instance_type,
            )
            if same and t.price_per_hour is not None:
                return t.price_per_hour
        return self.on_demand_price


def blocked_now(blocked: Sequence[Mapping[str, Any]], now_job: float) -> list[Mapping[str, Any]]:
    """The cool-down entries still in force at ``now_job``."""
    return [b for b in blocked if float(b.get("until", 0.0)) > now_job]


def _is_blocked(target: LaunchTarget, blocked: Sequence[Mapping[str, Any]]) -> bool:
    for entry in blocked:
        if entry.get("provider") != target.provider:
            continue
        zone = entry.get("zone")
        if zone is not None and zone == target.zone:
            return True
        if zone is None and entry.get("region") == target.region:
            return True
    return False


def attempt_targets(
    doc: JobDocument,
    pricing: str,
    *,
    blocked: Sequence[Mapping[str, Any]] = (),
    last: LaunchTarget | None = None,
    spot_price: Callable[[LaunchTarget], float | None] | None = None,
) -> list[LaunchTarget]:
    """The targets of the next attempt in ``pricing`` mode, best first (possibly none)."""
    found: list[LaunchTarget] = []
    for candidate in doc.targets(pricing):
        if _is_blocked(candidate, blocked):
            continue
        price = spot_price(candidate) if pricing == "spot" and spot_price is not None else None
        limit = doc.spot_limit(candidate) if price is not None else None
        if price is not None and limit is not None and price > limit:
            continue
        found.append(candidate if price is None else replace(candidate, price_per_hour=price))
    if last is None:
        return found
    same = [t for t in found if t.region == last.region and t.provider == last.provider]
    other = [t for t in found if t not in same]
    return same + other if doc.policy.strategy == "same_region" else other + same
