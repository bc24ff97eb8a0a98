"""Serving figures of an inference plan: one replica's p95 latency and what the workload's load
costs per 1M output tokens and per 1k requests. Pure; no states.

Every plan of a serving task serves the same requests per second for the same hours, so ranking
by expected cost (the ``cheapest`` objective) ranks by $ per 1M tokens too: a T4 / L4 / A10G
offer wins whenever its replicas meet the latency target for less (the sizing rejects those that
cannot, naming the figures).
"""

from __future__ import annotations

from gpulease.estimate.results import InferenceEstimate
from gpulease.optimizer.plan import Range, ServingFigures
from gpulease.optimizer.sizing import ConfigSizing

SECONDS_PER_HOUR = 3600.0


def serving_figures(
    estimate: InferenceEstimate, *, serving_hours: float, cost: Range | None
) -> ServingFigures:
    """The figures of a plan that serves ``estimate`` for ``serving_hours`` at ``cost``."""
    per_token = per_request = None
    rps = estimate.requests_per_second
    if cost is not None and serving_hours > 0 and rps > 0:
        hourly = cost.expected / serving_hours
        requests_per_hour = rps * SECONDS_PER_HOUR
        per_request = hourly / requests_per_hour * 1_000
        per_token = hourly / (requests_per_hour * estimate.output_tokens) * 1_000_000
    latency = estimate.latency
    return ServingFigures(
        replicas=estimate.replicas,
        gpus_per_replica=estimate.gpus_per_replica,
        requests_per_second=rps,
        tokens_per_second_per_replica=estimate.tokens_per_second_per_replica,
        ttft_p95_s=latency.ttft_p95_s if latency else None,
        tpot_p95_s=latency.tpot_p95_s if latency else None,
        latency_p95_s=latency.latency_p95_s if latency else None,
        usd_per_1m_output_tokens=per_token,
        usd_per_1k_requests=per_request,
    )


def serving_of(sizing: ConfigSizing, option: int, cost: Range | None) -> ServingFigures | None:
    """The figures of ``sizing``'s ``option`` at ``cost``; None unless it serves a workload."""
    estimate = sizing.serving[option] if option < len(sizing.serving) else None
    if estimate is None:
        return None
    return serving_figures(estimate, serving_hours=estimate.hours.expected, cost=cost)
