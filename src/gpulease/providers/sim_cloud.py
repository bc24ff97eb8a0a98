"""The simulated cloud's rules, separate from the processes it runs: capacity by region,
provisioning delay, and when spot nodes are taken back — all in the sim clock's time.

Preemptions come from a spot-availability trace (spot-traces JSON: a spot node launched at time
``t`` is taken back at the start of the first later tick whose count is below the node count;
the trace starts when the simulated cloud does and repeats past its end) or, without a trace,
from a rate (exponential inter-arrival per node, ``preemptions_per_hour``). Every random draw
comes from one seeded generator, so a run is reproducible for the same calls.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulease.billing import BadBillingRule, Billing
from gpulease.errors import UserInputError
from gpulease.providers.base import CapacityError
from gpulease.spot import Trace, load_trace


@dataclass(frozen=True, slots=True)
class SimSettings:
    """Settings of the sim provider (config file ``providers.sim`` or ``provider_config``).

    ``time_scale``: simulated seconds per real second (3600 = one simulated hour per second).
    ``provision_seconds``: (min, max) simulated seconds before a node runs.
    ``no_capacity``: regions or zones where every launch fails with a capacity error;
    ``capacity_error_rate``: chance that any other launch fails with one.
    ``spot_trace``: a trace file; else ``preemptions_per_hour`` per spot node (0 = never).
    ``notice_seconds``: simulated warning before a preemption (AWS gives 120 s).
    ``spot_price_changes``: ``[[hours, factor], ...]`` — from ``hours`` after the simulated cloud
    started, every spot price is its catalog price × ``factor`` (default 1).
    ``billing``: the billing rule of the cloud it simulates (the cost ledger; default
    ``second:60``, AWS's).
    """

    time_scale: float = 3600.0
    provision_seconds: tuple[float, float] = (60.0, 180.0)
    no_capacity: tuple[str, ...] = ()
    capacity_error_rate: float = 0.0
    spot_trace: str | None = None
    preemptions_per_hour: float = 0.0
    notice_seconds: float = 120.0
    spot_price_changes: tuple[tuple[float, float], ...] = ()
    seed: int = 0
    billing: str = "second:60"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "sim") -> SimSettings:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise UserInputError(
                f"{where}: unknown setting(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}"
            )
        values = dict(data)
        try:
            if "provision_seconds" in values:
                low, high = values["provision_seconds"]
                values["provision_seconds"] = (float(low), float(high))
            if "spot_price_changes" in values:
                values["spot_price_changes"] = tuple(
                    (float(hours), float(factor)) for hours, factor in values["spot_price_changes"]
                )
            if "no_capacity" in values:
                values["no_capacity"] = tuple(str(v) for v in values["no_capacity"])
            for name in (
                "time_scale",
                "capacity_error_rate",
                "preemptions_per_hour",
                "notice_seconds",
            ):
                if name in values:
                    values[name] = float(values[name])
        except (TypeError, ValueError) as exc:
            raise UserInputError(f"{where}: bad value: {exc}") from None
        settings = cls(**values)
        settings.validate(where)
        return settings

    def validate(self, where: str = "sim") -> None:
        if self.time_scale <= 0:
            raise UserInputError(f"{where}.time_scale: must be positive")
        low, high = self.provision_seconds
        if not 0 <= low <= high:
            raise UserInputError(f"{where}.provision_seconds: need 0 ≤ min ≤ max")
        if not 0 <= self.capacity_error_rate <= 1:
            raise UserInputError(f"{where}.capacity_error_rate: must be within 0..1")
        if self.preemptions_per_hour < 0 or self.notice_seconds < 0:
            raise UserInputError(f"{where}: preemptions_per_hour and notice_seconds must be ≥ 0")
        try:
            Billing.parse(self.billing)
        except BadBillingRule as exc:
            raise UserInputError(f"{where}.billing: {exc}") from None


class SimCloud:
    """Decides, in simulated time, what the sim provider's nodes go through."""

    def __init__(self, settings: SimSettings, *, start: float) -> None:
        self.settings = settings
        self.start = start
        self.rng = random.Random(settings.seed)
        self.trace: Trace | None = (
            load_trace(Path(settings.spot_trace)) if settings.spot_trace else None
        )

    def check_capacity(self, region: str | None, zone: str | None) -> None:
        """Raise :class:`CapacityError` when the simulated cloud has no room there."""
        where = [w for w in (zone, region) if w]
        if any(w in self.settings.no_capacity for w in where):
            raise CapacityError(f"no capacity in {where[0]}", region=region, zone=zone)
        if (
            self.settings.capacity_error_rate
            and self.rng.random() < self.settings.capacity_error_rate
        ):
            raise CapacityError(
                f"capacity error in {where[0] if where else 'the cloud'}", region=region, zone=zone
            )

    def ready_at(self, launched_at: float) -> float:
        low, high = self.settings.provision_seconds
        return launched_at + self.rng.uniform(low, high)

    def preempted_at(self, launched_at: float, nodes: int = 1) -> float | None:
        """When a spot node launched at ``launched_at`` is taken back (None: never)."""
        if self.trace is not None:
            return self._trace_preemption(launched_at, nodes)
        rate = self.settings.preemptions_per_hour
        if rate <= 0:
            return None
        return launched_at + self.rng.expovariate(rate) * 3600.0

    def _trace_preemption(self, launched_at: float, nodes: int) -> float | None:
        trace = self.trace
        assert trace is not None
        offset = max(0.0, launched_at - self.start)
        if not trace.available_at(offset, nodes):  # no spot now: it is taken at once
            return launched_at
        change = trace.next_change(offset, nodes)
        return None if change is None else self.start + change

    def spot_available(self, at: float, nodes: int = 1) -> bool:
        if self.trace is None:
            return True
        return self.trace.available_at(max(0.0, at - self.start), nodes)

    def spot_price_factor(self, at: float) -> float:
        """The factor on catalog spot prices at sim time ``at``."""
        factor = 1.0
        hours = (at - self.start) / 3600.0
        for since, value in sorted(self.settings.spot_price_changes):
            if hours >= since:
                factor = value
        return factor

    def spot_price_changes(self, after: float, until: float) -> list[tuple[float, float]]:
        """``(at, factor)`` of each change of the factor in ``(after, until]`` (sim time)."""
        changes: list[tuple[float, float]] = []
        factor = self.spot_price_factor(after)
        for since, value in sorted(self.settings.spot_price_changes):
            at = self.start + since * 3600.0
            if after < at <= until and value != factor:
                changes.append((at, value))
                factor = value
        return changes

    def notice_at(self, preempted_at: float) -> float:
        return preempted_at - self.settings.notice_seconds
