"""``GET /metrics``: the server's Prometheus text, collected from the state DB on each scrape.

Owns :class:`ControlPlaneCollector` (a ``prometheus_client`` custom collector: a handful of
grouped queries per scrape, no global registry, nothing kept between scrapes),
:func:`metrics_registry`, :func:`render`, :class:`MetricsEndpoint` and :func:`open_to_loopback`
(the config key ``server.metrics.open_to_loopback``). The metric names, types and labels are
fixed in docs/metrics.md; the jobs' recovery, deadline and checkpoint families and the provider
call counts are in :mod:`gpulease.server.metrics_jobs`. Counters come from the status history
(``status_changes``) and the job rows, which are never deleted, so they only grow, across server
restarts too. Moves no states.

The node and job metrics the agents relay (GPU utilisation, memory, …) are another
:data:`MetricSource` passed to :func:`render`: a callable returning ready text (rendered once per
relay pass by :mod:`gpulease.server.telemetry.prom`, so a scrape only concatenates).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import Engine, and_, case, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gpulease import __version__
from gpulease.errors import Retryable, UserInputError
from gpulease.server.budget_loop import BudgetLoop, budget_families
from gpulease.server.metrics_jobs import JobMetricInputs, job_families
from gpulease.server.metrics_services import service_families
from gpulease.server.runtime import PASS_BUCKETS, PassTimes
from gpulease.state import session_scope
from gpulease.state.ledger import accrued_by_labels
from gpulease.state.machines import ClusterStatus, JobStatus, NodeState
from gpulease.state.models import Cluster, Job, Node, StatusChange

if TYPE_CHECKING:
    from gpulease.server.endpoints import Endpoints  # the services' load balancers

#: a source of extra exposition text (complete metric families), appended after the control plane
MetricSource: TypeAlias = Callable[[], bytes]

CONTENT_TYPE = CONTENT_TYPE_LATEST
CONFIG_SECTION = "server"
#: nodes in these states are not billed (their share of the plan's price is left out of $/h)
UNBILLED_NODES = frozenset({NodeState.STOPPED, NodeState.PREEMPTED, NodeState.TERMINATED})
_JOB_DONE = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
_TARGET_LABELS = ["cluster", "provider", "region", "instance_type", "spot"]


def open_to_loopback(config: Mapping[str, Any]) -> bool:
    """``server.metrics.open_to_loopback`` of the config file (default false): whether a scraper
    on a loopback address may read ``/metrics`` without the API token."""
    server = config.get(CONFIG_SECTION)
    server = {} if server is None else server
    if not isinstance(server, dict):
        raise UserInputError("server: must be a mapping (metrics: {open_to_loopback: true})")
    section = server.get("metrics")
    section = {} if section is None else section
    if not isinstance(section, dict):
        raise UserInputError("server.metrics: must be a mapping (open_to_loopback: true)")
    unknown = sorted(set(section) - {"open_to_loopback"})
    if unknown:
        raise UserInputError(f"server.metrics.{unknown[0]}: unknown key (known: open_to_loopback)")
    value = section.get("open_to_loopback", False)
    if not isinstance(value, bool):
        raise UserInputError(f"server.metrics.open_to_loopback: true or false, not {value!r}")
    return value


class ControlPlaneCollector(Collector):
    """The control plane's metrics, read from the DB at each :meth:`collect`."""

    def __init__(
        self,
        engine: Engine,
        *,
        pass_times: PassTimes | None = None,
        started_at: float | None = None,
        jobs: JobMetricInputs | None = None,
        budgets: BudgetLoop | None = None,
        services: Endpoints | None = None,
    ) -> None:
        self.engine = engine
        self.services = services  # gpulease_service_*{service} (server.metrics_services)
        self.budgets = budgets  # gpulease_budget_*{budget}
        self.pass_times = pass_times
        self.jobs = jobs or JobMetricInputs()
        self.started_at = time.time() if started_at is None else started_at

    def collect(self) -> Iterator[Metric]:
        try:
            with session_scope(self.engine) as session:
                families = [
                    *_by_status(session),
                    *_prices(session),
                    *_counters(session),
                    *job_families(session, self.jobs),
                    _cost_accrued(session),
                ]
                if self.services is not None:
                    families += service_families(session, self.services)
        except OperationalError as exc:  # the DB busy or gone: the scraper retries
            raise Retryable(f"state DB: {exc.orig}") from None
        yield from families
        if self.budgets is not None:
            yield from budget_families(self.budgets.states())
        yield from self._server()

    def _server(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("gpulease_build_info", "gpulease version", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
        yield GaugeMetricFamily(
            "gpulease_server_start_time_seconds",
            "when this server process started (Unix time)",
            value=self.started_at,
        )
        if self.pass_times is not None:
            yield _pass_histogram(self.pass_times)


def _status_family(
    name: str, doc: str, values: Iterable[str], counts: Mapping[str, int]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["status"])
    for value in values:
        family.add_metric([value], float(counts.get(value, 0)))
    return family


def _by_status(session: Session) -> list[Metric]:
    def counts(column: Any) -> dict[str, int]:
        rows = session.execute(select(column, func.count()).group_by(column))
        return {str(status): int(n) for status, n in rows}

    return [
        _status_family("gpulease_clusters", "clusters by status",
                       (s.value for s in ClusterStatus), counts(Cluster.status)),
        _status_family("gpulease_nodes", "nodes by state",
                       (s.value for s in NodeState), counts(Node.state)),
        _status_family("gpulease_jobs", "managed jobs by status",
                       (s.value for s in JobStatus), counts(Job.status)),
    ]  # fmt: skip


def _billed_share(session: Session) -> dict[int, tuple[int, int]]:
    """Per cluster id: (nodes billed, nodes recorded)."""
    billed = case((Node.state.in_(list(UNBILLED_NODES)), 0), else_=1)
    stmt = select(Node.cluster_id, func.sum(billed), func.count()).group_by(Node.cluster_id)
    return {int(cid): (int(b or 0), int(n)) for cid, b, n in session.execute(stmt)}


def _price_now(cluster: Cluster, share: Mapping[int, tuple[int, int]]) -> float | None:
    """The plan's $/h for the nodes billed now: the quoted price × billed nodes / num_nodes."""
    if cluster.price_per_hour is None:
        return None
    billed, _recorded = share.get(cluster.id, (0, 0))
    return cluster.price_per_hour * min(billed, cluster.num_nodes) / max(cluster.num_nodes, 1)


def _target_labels(cluster: Cluster) -> list[str]:
    return [cluster.name, cluster.provider, cluster.region or "", cluster.instance_type or "",
            "true" if cluster.spot else "false"]  # fmt: skip


def _prices(session: Session) -> list[Metric]:
    share = _billed_share(session)
    live = session.scalars(
        select(Cluster).where(Cluster.status != ClusterStatus.TERMINATED).order_by(Cluster.id)
    ).all()
    clusters = GaugeMetricFamily(
        "gpulease_cluster_price_usd_per_hour",
        "the plan's price of the cluster's nodes billed now (not stopped, preempted or gone)",
        labels=_TARGET_LABELS,
    )
    by_id: dict[int, Cluster] = {}
    for cluster in live:
        by_id[cluster.id] = cluster
        price = _price_now(cluster, share)
        if price is not None:
            clusters.add_metric(_target_labels(cluster), price)
    jobs = GaugeMetricFamily(
        "gpulease_job_price_usd_per_hour",
        "the $/h of the managed job's current attempt cluster",
        labels=["job_id", *_TARGET_LABELS],
    )
    running = session.execute(
        select(Job.id, Job.cluster_id).where(Job.status.not_in(_JOB_DONE)).order_by(Job.id)
    )
    for job_id, cluster_id in running:
        attempt = by_id.get(cluster_id) if cluster_id is not None else None
        price = _price_now(attempt, share) if attempt is not None else None
        if attempt is not None and price is not None:
            jobs.add_metric([str(job_id), *_target_labels(attempt)], price)
    return [clusters, jobs]


def _counters(session: Session) -> list[Metric]:
    kind, created = StatusChange.entity_kind, StatusChange.from_status.is_(None)

    def count_of(*where: Any) -> Any:
        return func.coalesce(func.sum(case((and_(*where), 1), else_=0)), 0)

    history = session.execute(
        select(
            count_of(kind == "intent", created),
            count_of(kind == "intent", created, StatusChange.reason == "failover"),
            count_of(kind == "node", StatusChange.to_status == NodeState.PREEMPTED.value),
        ).where(kind.in_(["intent", "node"]))
    ).one()
    jobs = session.execute(
        select(func.coalesce(func.sum(Job.recoveries), 0), func.coalesce(func.sum(Job.restarts), 0))
    ).one()
    rows: Sequence[tuple[str, str, Any]] = (
        ("gpulease_launches", "launch requests written (launch intents: first launches, "
         "failovers, recoveries)", history[0]),
        ("gpulease_failovers", "launches moved to the next plan after a failed target",
         history[1]),
        ("gpulease_preemptions", "nodes the provider took (spot preemptions)", history[2]),
        ("gpulease_job_recoveries", "managed-job recoveries after preemptions or lost nodes",
         jobs[0]),
        ("gpulease_job_restarts", "managed-job restarts after the task's own failures", jobs[1]),
    )  # fmt: skip
    return [CounterMetricFamily(name, doc, value=float(value)) for name, doc, value in rows]


def _cost_accrued(session: Session) -> CounterMetricFamily:
    """``gpulease_cost_accrued_usd_total``: the cost ledger's dollars (every row, open ones to
    their last accrual), by cluster, job and offer."""
    family = CounterMetricFamily(
        "gpulease_cost_accrued_usd",
        "dollars the cost ledger holds (instances, stopped volumes, checkpoint storage)",
        labels=["cluster", "job_id", "provider", "region", "instance_type", "spot"],
    )
    totals: dict[tuple[str, str, str, str, str, str], float] = {}
    for (cluster, job_id, provider, region, itype, pricing), usd in accrued_by_labels(session):
        job = "" if job_id is None else str(job_id)
        spot = "true" if pricing == "spot" else "false"
        key = (cluster or "", job, str(provider), region or "", itype or "", spot)
        totals[key] = totals.get(key, 0.0) + usd
    for key, usd in sorted(totals.items()):
        family.add_metric(list(key), usd)
    return family


def _pass_histogram(times: PassTimes) -> HistogramMetricFamily:
    family = HistogramMetricFamily(
        "gpulease_reconcile_pass_seconds", "duration of one reconcile pass", labels=["loop"]
    )
    for loop, stats in sorted(times.snapshot().items()):
        cumulative, buckets = 0, []
        for bound, n in zip([*map(_bound, PASS_BUCKETS), "+Inf"], stats.buckets, strict=True):
            cumulative += n
            buckets.append((bound, float(cumulative)))
        family.add_metric([loop], buckets, stats.total_s)
    return family


def _bound(value: float) -> str:
    return repr(float(value))


def metrics_registry(collector: Collector) -> CollectorRegistry:
    """A private registry holding only ``collector`` (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry, sources: Sequence[MetricSource] = ()) -> bytes:
    """The exposition text: the registry's families, then each source's text."""
    return b"".join([generate_latest(registry), *(source() for source in sources)])


@dataclass(frozen=True)
class MetricsEndpoint:
    """What ``GET /metrics`` serves: the registry, the extra sources, and whether loopback
    scrapers need no token."""

    registry: CollectorRegistry
    open_to_loopback: bool = False
    sources: Sequence[MetricSource] = ()

    def text(self) -> bytes:
        return render(self.registry, self.sources)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a request's peer address) is a loopback address."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
