"""The values the estimator returns: plain frozen dataclasses, cheap to build on the hot path.

The optimizer reads these; it never builds them. ``HoursRange`` also carries dollars and GPU-hours
once the optimizer has scaled it (:meth:`HoursRange.scale`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulease.estimate.latency import Latency


@dataclass(frozen=True, slots=True)
class HoursRange:
    """A low / expected / high estimate (hours, or anything proportional to hours)."""

    low: float
    expected: float
    high: float

    def scale(self, k: float) -> HoursRange:
        """The same range multiplied by ``k`` (GPUs, $/h, …)."""
        return HoursRange(self.low * k, self.expected * k, self.high * k)


@dataclass(frozen=True, slots=True)
class TrainingEstimate:
    """How a training workload runs on one configuration (GPUs × nodes × fabric).

    ``hours`` is wall-clock time; GPU-hours are ``hours.scale(gpus)``. ``sharding`` is the strategy
    actually assumed ("ddp", "fsdp" or "zero3"); ``mfu`` the expected model FLOPs utilisation and
    ``scaling_efficiency`` the multi-GPU / multi-node efficiency used for ``hours.expected``.
    ``expert_parallel`` is the GPUs a mixture of experts' routed experts are spread over (1 for
    a dense model).
    """

    total_flops: float
    sharding: str
    memory_per_gpu_gb: float
    gpus: int
    mfu: float
    scaling_efficiency: float
    hours: HoursRange
    notes: tuple[str, ...]
    expert_parallel: int = 1


@dataclass(frozen=True, slots=True)
class InferenceEstimate:
    """How a serving workload runs: replicas of ``gpus_per_replica`` tensor-parallel GPUs.

    ``tokens_per_second_per_replica`` counts prompt and output tokens together (the unit the
    replicas are sized in); ``hours`` is how long the service runs (``workload.hours``).
    ``latency`` holds one replica's p95 figures at its share of ``requests_per_second``
    (None where that load is not served); ``target_miss`` says why no replica meets the
    workload's latency targets (then ``replicas`` is only the throughput sizing).
    """

    gpus_per_replica: int
    replicas: int
    memory_per_gpu_gb: float
    tokens_per_second_per_replica: float
    hours: HoursRange
    notes: tuple[str, ...]
    latency: Latency | None = None
    target_miss: str | None = None
    requests_per_second: float = 0.0
    output_tokens: int = 0
