"""The optimizer's results: :class:`Plan`, :class:`Range`, :class:`Rejection`, :class:`PlanResult`,
and a serving plan's :class:`ServingFigures` (latency and $ per 1M output tokens / 1k requests).

Plans are plain frozen dataclasses built only for the few offers that make the top N or the Pareto
front; the enumeration itself works on numpy columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Pricing = Literal["on_demand", "spot", "reserved"]
Objective = Literal["cheapest", "fastest", "price-per-tflop"]
OBJECTIVES: tuple[Objective, ...] = ("cheapest", "fastest", "price-per-tflop")


@dataclass(frozen=True, slots=True)
class Range:
    """A low / expected / high estimate."""

    low: float
    expected: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {
            "low": round(self.low, 4),
            "expected": round(self.expected, 4),
            "high": round(self.high, 4),
        }


@dataclass(frozen=True, slots=True)
class ServingFigures:
    """What an inference plan serves: replicas, one replica's p95 latency at its share of the
    load, and what the load costs per 1M output tokens and per 1k requests (the plan's expected
    cost per hour, spot restarts included, over the requests and tokens it serves an hour)."""

    replicas: int
    gpus_per_replica: int
    requests_per_second: float  # the workload's, all replicas together
    tokens_per_second_per_replica: float  # capacity at a full batch, prompt + output
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    latency_p95_s: float | None
    usd_per_1m_output_tokens: float | None
    usd_per_1k_requests: float | None

    def to_dict(self) -> dict[str, Any]:
        def r(value: float | None, digits: int = 4) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "requests_per_second": self.requests_per_second,
            "tokens_per_second_per_replica": round(self.tokens_per_second_per_replica, 1),
            "ttft_p95_s": r(self.ttft_p95_s),
            "tpot_p95_s": r(self.tpot_p95_s, 5),
            "latency_p95_s": r(self.latency_p95_s),
            "usd_per_1m_output_tokens": r(self.usd_per_1m_output_tokens),
            "usd_per_1k_requests": r(self.usd_per_1k_requests),
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """One way to run the task: an offer × node count × pricing model, with estimates."""

    rank: int
    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    part: str
    gpus_per_node: int
    num_nodes: int
    pricing: Pricing
    price_per_hour: float  # quoted, whole plan (all nodes)
    est_hours: Range | None
    est_cost: Range | None
    gpu_hours: Range | None
    launchable: bool
    reasons: tuple[str, ...]
    gpu_memory_gb: float = 0.0
    peak_tflops: float = 0.0  # dense peak of the whole plan at the workload's precision
    interruption_band: int | None = None
    sharding: str | None = None
    as_of: str = ""
    source: str = ""
    cpu_arch: str = "x86_64"  # the host CPU architecture of the offer
    vcpus: float | None = None  # per node, as the offer states (None: not stated)
    ram_gb: float | None = None  # per node
    serving: ServingFigures | None = None  # inference plans only

    @property
    def usd_per_1m_output_tokens(self) -> float | None:
        """An inference plan's cost per 1M output tokens at the workload's rate (else None)."""
        return self.serving.usd_per_1m_output_tokens if self.serving else None

    @property
    def usd_per_1k_requests(self) -> float | None:
        """An inference plan's cost per 1k requests at the workload's rate (else None)."""
        return self.serving.usd_per_1k_requests if self.serving else None

    @property
    def cpu_only(self) -> bool:
        """A CPU-only plan: no accelerator on its nodes."""
        return self.gpus_per_node == 0

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "provider": self.provider,
            "region": self.region,
            "zone": self.zone,
            "instance_type": self.instance_type,
            "accelerator": self.accelerator,
            "part": self.part,
            "gpus_per_node": self.gpus_per_node,
            "num_nodes": self.num_nodes,
            "pricing": self.pricing,
            "price_per_hour": round(self.price_per_hour, 4),
            "est_hours": self.est_hours.to_dict() if self.est_hours else None,
            "est_cost": self.est_cost.to_dict() if self.est_cost else None,
            "gpu_hours": self.gpu_hours.to_dict() if self.gpu_hours else None,
            "launchable": self.launchable,
            "reasons": list(self.reasons),
            "gpu_memory_gb": self.gpu_memory_gb,
            "peak_tflops": round(self.peak_tflops, 1),
            "interruption_band": self.interruption_band,
            "sharding": self.sharding,
            "as_of": self.as_of,
            "source": self.source,
            "cpu_arch": self.cpu_arch,
            "vcpus": self.vcpus,
            "ram_gb": self.ram_gb,
            "cpu_only": self.cpu_only,
            "serving": self.serving.to_dict() if self.serving else None,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    """A class of offers the optimizer ruled out, and why."""

    reason: str
    offers: int

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "offers": self.offers}


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Ranked plans, the cost/time Pareto front, and every rejected class of offers."""

    plans: tuple[Plan, ...]
    pareto: tuple[Plan, ...]
    rejected: tuple[Rejection, ...]
    objective: Objective
    notes: tuple[str, ...] = field(default_factory=tuple)
    offers_considered: int = 0
    offers_feasible: int = 0  # offers with at least one feasible plan

    def to_dict(self) -> dict[str, Any]:
        return {
            "objective": self.objective,
            "plans": [p.to_dict() for p in self.plans],
            "pareto": [p.to_dict() for p in self.pareto],
            "rejected": [r.to_dict() for r in self.rejected],
            "notes": list(self.notes),
            "offers_considered": self.offers_considered,
            "offers_feasible": self.offers_feasible,
        }
