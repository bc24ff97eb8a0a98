"""The relayed series of ``GET /metrics`` (docs/metrics.md, "The nodes' and jobs' metrics" and
``gpulease_telemetry_relay_seconds``), rendered once per relay pass.

Owns :class:`NodeLabels` (the labels every relayed series of a node carries, and the point row
it writes) and :class:`RelayedMetrics` (a :data:`~gpulease.server.metrics.MetricSource`: the
relay calls :meth:`~RelayedMetrics.update` after each pass, which renders the text into bytes; a
scrape only reads them). Values are each node's newest raw sample, in Prometheus base units
(MB → bytes, MHz → hertz); a node whose newest sample is older than 3 intervals drops out
(the relay's interval, or the agent's sampling period when that is longer). Moves no states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gpulease.server.runtime import PASS_BUCKETS, PassTimes
from gpulease.server.telemetry.latest import NodeLatest
from gpulease.server.telemetry.store import PointRow

STALE_INTERVALS = 3
MB = 1_000_000.0
BASE_LABELS = ["cluster", "job_id", "node_rank", "provider", "region", "instance_type", "spot"]
THROTTLE_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake",
                    "sync_boost", "applications_clocks", "display_clocks")  # fmt: skip
#: (name, sample key, factor, help) of the per-GPU gauges
GPU_GAUGES = (
    ("gpulease_gpu_utilization_percent", "utilization_pct", 1.0, "NVML's GPU utilisation"),
    ("gpulease_gpu_memory_used_bytes", "memory_used_mb", MB, "device memory in use"),
    ("gpulease_gpu_memory_total_bytes", "memory_total_mb", MB, "device memory"),
    ("gpulease_gpu_power_watts", "power_w", 1.0, "power draw"),
    ("gpulease_gpu_power_limit_watts", "power_limit_w", 1.0, "enforced power limit"),
    ("gpulease_gpu_temperature_celsius", "temperature_c", 1.0, "core temperature"),
    ("gpulease_gpu_sm_clock_hertz", "sm_clock_mhz", MB, "SM clock"),
)
NODE_GAUGES = (
    ("gpulease_node_cpu_percent", "cpu_pct", 1.0, "host CPU use (all cores, 0-100)"),
    ("gpulease_node_memory_used_bytes", "memory_used_mb", MB, "host memory in use"),
    ("gpulease_node_memory_total_bytes", "memory_total_mb", MB, "host memory"),
    ("gpulease_node_disk_read_bytes_per_second", "disk_read_bps", 1.0, "disk reads"),
    ("gpulease_node_disk_write_bytes_per_second", "disk_write_bps", 1.0, "disk writes"),
    ("gpulease_node_network_receive_bytes_per_second", "net_recv_bps", 1.0, "network in"),
    ("gpulease_node_network_transmit_bytes_per_second", "net_sent_bps", 1.0, "network out"),
)
TRAIN_GAUGES = (
    ("gpulease_train_step", "step", "the training job's current step"),
    ("gpulease_train_step_seconds", "step_time_s", "mean time of a step over the last window"),
    ("gpulease_train_samples_per_second", "samples_per_s", "samples/s over the window"),
    ("gpulease_train_tokens_per_second", "tokens_per_s", "tokens/s over the window"),
    ("gpulease_train_mfu_ratio", "mfu", "model FLOPs utilisation (0-1)"),
    ("gpulease_train_data_wait_ratio", "data_wait_ratio", "share of step time waiting for data"),
    ("gpulease_train_checkpoint_step", "checkpoint_step", "step of the last checkpoint saved"),
)


@dataclass(frozen=True, slots=True)
class NodeLabels:
    cluster_id: int
    cluster: str
    job_id: int | None
    node_rank: int
    provider: str
    region: str
    instance_type: str
    spot: bool

    def values(self) -> list[str]:
        return [self.cluster, "" if self.job_id is None else str(self.job_id),
                str(self.node_rank), self.provider, self.region, self.instance_type,
                "true" if self.spot else "false"]  # fmt: skip

    def point(
        self, resolution_s: int, at: float, members: Sequence[object], data: Mapping[str, Any]
    ) -> PointRow:
        return PointRow(self.cluster_id, self.cluster, self.job_id, self.node_rank,
                        resolution_s, at, len(members), data)  # fmt: skip


class RelayedMetrics:
    """The relayed text, replaced after each pass; ``text`` is the ``/metrics`` source."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._text = b""

    def text(self) -> bytes:
        with self._lock:
            return self._text

    def stale(self, latest: NodeLatest, now: float) -> bool:
        """Whether the node's newest sample is older than 3 intervals (the relay's, or its
        agent's sampling period when longer)."""
        period = max(self.interval_s, latest.interval_s or 0.0)
        return now - latest.at > STALE_INTERVALS * period

    def update(
        self,
        nodes: Sequence[tuple[NodeLabels, NodeLatest | None]],
        now: float,
        times: PassTimes | None = None,
    ) -> None:
        fresh = [(labels, n) for labels, n in nodes if n is not None and not self.stale(n, now)]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(fresh, now, times))
        rendered = generate_latest(registry)
        with self._lock:
            self._text = rendered


class _Families(Collector):
    def __init__(
        self, nodes: Sequence[tuple[NodeLabels, NodeLatest]], now: float, times: PassTimes | None
    ) -> None:
        self.nodes = nodes
        self.now = now
        self.times = times

    def collect(self) -> Iterator[Metric]:
        yield from _gpu_families(self.nodes)
        yield from _node_families(self.nodes)
        yield from _train_families(self.nodes, self.now)
        if self.times is not None:
            yield _relay_histogram(self.times)


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _gpus(latest: NodeLatest) -> list[Mapping[str, Any]]:
    return [g for g in latest.sample.get("gpus") or () if isinstance(g, Mapping)]


def _gpu_families(nodes: Sequence[tuple[NodeLabels, NodeLatest]]) -> Iterator[Metric]:
    gpu_labels = [*BASE_LABELS, "gpu"]
    for name, key, factor, doc in GPU_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=gpu_labels)
        for labels, latest in nodes:
            for gpu in _gpus(latest):
                value = _number(gpu.get(key))
                if value is not None:
                    family.add_metric([*labels.values(), str(gpu.get("index"))], value * factor)
        yield family
    throttled = GaugeMetricFamily("gpulease_gpu_throttled", "1 per clock-throttle reason active",
                                  labels=[*gpu_labels, "reason"])  # fmt: skip
    ecc = CounterMetricFamily("gpulease_gpu_ecc_errors", "ECC errors (volatile counts)",
                              labels=[*gpu_labels, "kind"])  # fmt: skip
    xid = CounterMetricFamily("gpulease_gpu_xid_errors", "XID events seen since the agent "
                              "started sampling", labels=gpu_labels)  # fmt: skip
    for labels, latest in nodes:
        for gpu in _gpus(latest):
            base = [*labels.values(), str(gpu.get("index"))]
            active = [str(r) for r in gpu.get("throttle_reasons") or ()]
            for reason in dict.fromkeys([*THROTTLE_REASONS, *active]):
                throttled.add_metric([*base, reason], 1.0 if reason in active else 0.0)
            for kind in ("corrected", "uncorrected"):
                if (count := _number(gpu.get(f"ecc_errors_{kind}"))) is not None:
                    ecc.add_metric([*base, kind], count)
            if (count := _number(gpu.get("xid_errors"))) is not None:
                xid.add_metric(base, count)
    yield from (throttled, ecc, xid)


def _node_families(nodes: Sequence[tuple[NodeLabels, NodeLatest]]) -> Iterator[Metric]:
    for name, key, factor, doc in NODE_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=BASE_LABELS)
        for labels, latest in nodes:
            host = latest.sample.get("node")
            value = _number(host.get(key)) if isinstance(host, Mapping) else None
            if value is not None:
                family.add_metric(labels.values(), value * factor)
        yield family
    rtt = GaugeMetricFamily("gpulease_node_peer_rtt_seconds", "round trip to another node",
                            labels=[*BASE_LABELS, "peer_rank"])  # fmt: skip
    available = GaugeMetricFamily(
        "gpulease_node_gpu_metrics_available",
        "1 when the node reports GPUs",
        labels=[*BASE_LABELS, "source"],
    )
    last = GaugeMetricFamily(
        "gpulease_node_last_sample_timestamp_seconds",
        "the agent's clock at its last relayed sample",
        labels=BASE_LABELS,
    )
    for labels, latest in nodes:
        for peer in latest.sample.get("peers") or ():
            value = _number(peer.get("rtt_s")) if isinstance(peer, Mapping) else None
            if value is not None:
                rtt.add_metric([*labels.values(), str(peer.get("node_rank"))], value)
        source = str(latest.sample.get("gpu_source") or "none")
        has_gpus = source != "none" and bool(_gpus(latest))
        available.add_metric([*labels.values(), source], 1.0 if has_gpus else 0.0)
        last.add_metric(labels.values(), latest.at)
    yield from (rtt, available, last)


def _train_families(nodes: Sequence[tuple[NodeLabels, NodeLatest]], now: float) -> Iterator[Metric]:
    trains = [(labels, t) for labels, latest in nodes
              if isinstance(t := latest.sample.get("train"), Mapping)]  # fmt: skip
    for name, key, doc in TRAIN_GAUGES:
        family = GaugeMetricFamily(name, doc, labels=BASE_LABELS)
        for labels, train in trains:
            if (value := _number(train.get(key))) is not None:
                family.add_metric(labels.values(), value)
        yield family
    age = GaugeMetricFamily(
        "gpulease_train_checkpoint_age_seconds",
        "seconds since the last checkpoint was saved",
        labels=BASE_LABELS,
    )
    for labels, train in trains:
        if (saved := _number(train.get("checkpoint_at"))) is not None:
            age.add_metric(labels.values(), max(0.0, now - saved))
    yield age


def _relay_histogram(times: PassTimes) -> HistogramMetricFamily:
    stats = times.snapshot().get("relay")
    family = HistogramMetricFamily("gpulease_telemetry_relay_seconds", "one relay pass")
    if stats is None:
        return family
    cumulative, buckets = 0, []
    for bound, n in zip([*map(repr, map(float, PASS_BUCKETS)), "+Inf"], stats.buckets,
                        strict=True):  # fmt: skip
        cumulative += n
        buckets.append((bound, float(cumulative)))
    family.add_metric([], buckets, stats.total_s)
    return family
