"""The services' families of ``GET /metrics`` (docs/metrics.md): replicas by state and the
replicas wanted, from the state DB; requests, failures, in flight, QPS and latency quantiles,
from each service's load balancer (counted since that balancer started: a server restart starts
them again at 0, which Prometheus' ``rate`` takes as a counter reset). Moves no states.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpulease.state import Cluster, ClusterStatus, Service, ServiceStatus

if TYPE_CHECKING:
    from gpulease.server.endpoints import Endpoints

_C = ClusterStatus
REPLICA_STATES = ("provisioning", "starting", "ready", "draining")


def _replica_state(endpoints: Endpoints, service_id: int, cluster: Cluster) -> str | None:
    if cluster.status in (_C.TERMINATING, _C.TERMINATED):
        return None
    behind = endpoints.replica_state(service_id, cluster.id)
    if behind is not None:
        return behind
    if cluster.status in (_C.PENDING, _C.PROVISIONING):
        return "provisioning"
    return "starting"


def service_families(session: Session, endpoints: Endpoints) -> list[Metric]:
    replicas = GaugeMetricFamily("gpulease_service_replicas", "a service's replicas by state",
                                 labels=["service", "state"])  # fmt: skip
    desired = GaugeMetricFamily("gpulease_service_desired_replicas",
                                "the replicas a service wants now (the autoscaler's count)",
                                labels=["service"])  # fmt: skip
    requests = CounterMetricFamily("gpulease_service_requests",
                                   "requests through a service's endpoint",
                                   labels=["service"])  # fmt: skip
    failed = CounterMetricFamily("gpulease_service_requests_failed",
                                 "requests through a service's endpoint that failed",
                                 labels=["service"])  # fmt: skip
    in_flight = GaugeMetricFamily("gpulease_service_in_flight",
                                  "requests in flight through a service's endpoint",
                                  labels=["service"])  # fmt: skip
    qps = GaugeMetricFamily("gpulease_service_qps", "requests per second over the last minute",
                            labels=["service"])  # fmt: skip
    latency = GaugeMetricFamily("gpulease_service_latency_seconds",
                                "request latency through the endpoint over the last minute",
                                labels=["service", "quantile"])  # fmt: skip
    live = select(Service).where(Service.status != ServiceStatus.DOWN).order_by(Service.id)
    for row in session.scalars(live):
        counts = dict.fromkeys(REPLICA_STATES, 0)
        stmt = select(Cluster).where(Cluster.service_id == row.id)
        for cluster in session.scalars(stmt):
            state = _replica_state(endpoints, row.id, cluster)
            if state is not None:
                counts[state] += 1
        for state, n in counts.items():
            replicas.add_metric([row.name, state], float(n))
        desired.add_metric([row.name], float(row.desired_replicas))
        stats = endpoints.stats(row.id)
        if stats is None:
            continue
        requests.add_metric([row.name], float(stats.requests))
        failed.add_metric([row.name], float(stats.failed))
        in_flight.add_metric([row.name], float(stats.in_flight))
        qps.add_metric([row.name], float(stats.qps))
        for quantile, value in (("0.5", stats.latency_p50_s), ("0.95", stats.latency_p95_s)):
            if value is not None:
                latency.add_metric([row.name, quantile], float(value))
    return [replicas, desired, requests, failed, in_flight, qps, latency]
