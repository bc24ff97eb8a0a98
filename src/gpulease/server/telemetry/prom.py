"""The relayed series of ``GET /metrics`` (docs/metrics.md, "The nodes' and jobs' metrics" and
``gpulease_telemetry_relay_seconds``).

Owns :class:`NodeLabels` (the labels every relayed series of a node carries, and the point row
it writes) and :class:`RelayedMetrics` (a :data:`~gpulease.server.metrics.MetricSource`). After
each relay pass :meth:`~RelayedMetrics.update` renders the text of each node whose newest sample
is new since the last pass (its lines of every family, formatted directly: the node's label
prefix is escaped once; kept LZ4-compressed, ~4 kB a node instead of ~26 kB) and keeps the
other nodes' pieces, then joins them under each family's header into the text a scrape serves,
kept compressed too (a scrape inflates it, ~25 ms for the ~26 MB of 1,000 nodes of 8 GPUs,
which are not held between scrapes). Values are each node's newest raw sample, in Prometheus
base units (MB → bytes, MHz → hertz); a node whose newest sample is older than 3 intervals drops
out (the relay's interval, or the agent's sampling period when that is longer). Moves no states.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import lz4.frame
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpulease.server.runtime import PASS_BUCKETS, PassTimes
from gpulease.server.telemetry.latest import NodeLatest
from gpulease.server.telemetry.memory import map_large_buffers
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
#: (exposed name, type, help) of each family a node's piece has, in the order they are served
FAMILIES: tuple[tuple[str, str, str], ...] = (
    *((name, "gauge", doc) for name, _, _, doc in GPU_GAUGES),
    ("gpulease_gpu_throttled", "gauge", "1 per clock-throttle reason active"),
    ("gpulease_gpu_ecc_errors_total", "counter", "ECC errors (volatile counts)"),
    (
        "gpulease_gpu_xid_errors_total",
        "counter",
        "XID events seen since the agent started sampling",
    ),
    *((name, "gauge", doc) for name, _, _, doc in NODE_GAUGES),
    ("gpulease_node_peer_rtt_seconds", "gauge", "round trip to another node"),
    ("gpulease_node_gpu_metrics_available", "gauge", "1 when the node reports GPUs"),
    (
        "gpulease_node_last_sample_timestamp_seconds",
        "gauge",
        "the agent's clock at its last relayed sample",
    ),
    *((name, "gauge", doc) for name, _, doc in TRAIN_GAUGES),
)
AGE = ("gpulease_train_checkpoint_age_seconds", "gauge",
       "seconds since the last checkpoint was saved")  # fmt: skip


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

    def prefix(self) -> str:
        """The node's labels as exposed (``cluster="c1",job_id="",...``), escaped."""
        return ",".join(f'{k}="{_escape(v)}"' for k, v in zip(BASE_LABELS, self.values(),
                                                                strict=True))  # fmt: skip

    def point(
        self, resolution_s: int, at: float, samples: int, data: Mapping[str, Any]
    ) -> PointRow:
        return PointRow(self.cluster_id, self.cluster, self.job_id, self.node_rank,
                        resolution_s, at, samples, data)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Piece:
    """One node's rendered lines of every family (:data:`FAMILIES`), from ``latest`` and
    ``labels``, compressed (``blob``; family ``i`` ends at ``ends[i]`` once inflated)."""

    labels: NodeLabels
    latest: NodeLatest
    blob: bytes
    ends: tuple[int, ...]
    checkpoint_at: float | None

    def families(self) -> list[memoryview]:
        text = memoryview(lz4.frame.decompress(self.blob))
        return [text[start:end] for start, end in zip((0, *self.ends), self.ends, strict=False)]


class RelayedMetrics:
    """The relayed text; ``text`` is the ``/metrics`` source."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._pieces: dict[tuple[int, int], _Piece] = {}
        self._text = lz4.frame.compress(b"")
        map_large_buffers()  # a scrape's buffers go back to the system when freed

    def text(self) -> bytes:
        with self._lock:
            packed = self._text
        text: bytes = lz4.frame.decompress(packed)
        return text

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
        """Render the nodes whose newest sample changed, drop the stale and gone ones, and
        join what a scrape serves."""
        pieces: dict[tuple[int, int], _Piece] = {}
        for labels, latest in nodes:
            if latest is None or self.stale(latest, now):
                continue
            key = (labels.cluster_id, labels.node_rank)
            piece = self._pieces.get(key)
            if piece is None or piece.latest is not latest or piece.labels != labels:
                piece = _render(labels, latest)
            pieces[key] = piece
        self._pieces = pieces
        packed = lz4.frame.compress(_join(list(pieces.values()), now, times))
        with self._lock:
            self._text = packed


def _join(pieces: Sequence[_Piece], now: float, times: PassTimes | None) -> bytes:
    """The text a scrape serves: each family's header, then every node's lines of it."""
    parts: list[bytes | memoryview] = []
    families = [p.families() for p in pieces]
    for i, (name, kind, doc) in enumerate(FAMILIES):
        parts.append(_header(name, kind, doc))
        parts.extend(node[i] for node in families)
    parts.append(_header(*AGE))
    for p in pieces:
        if p.checkpoint_at is not None:
            prefix = p.labels.prefix()
            parts.append(f"{AGE[0]}{{{prefix}}} {_go(max(0.0, now - p.checkpoint_at))}\n".encode())
    if times is not None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Histogram(times))
        parts.append(generate_latest(registry))
    return b"".join(parts)


def _header(name: str, kind: str, doc: str) -> bytes:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n".encode()


def _render(labels: NodeLabels, latest: NodeLatest) -> _Piece:
    prefix = labels.prefix()
    sample = latest.sample
    gpus = [g for g in sample.get("gpus") or () if isinstance(g, Mapping)]
    lines: list[list[str]] = [[] for _ in FAMILIES]
    gpu_prefixes = [f'{prefix},gpu="{_escape(str(g.get("index")))}"' for g in gpus]
    for i, (name, key, factor, _) in enumerate(GPU_GAUGES):
        out = lines[i]
        for gpu, gp in zip(gpus, gpu_prefixes, strict=True):
            if (value := _number(gpu.get(key))) is not None:
                out.append(f"{name}{{{gp}}} {_go(value * factor)}\n")
    n = len(GPU_GAUGES)
    for gpu, gp in zip(gpus, gpu_prefixes, strict=True):
        _gpu_lines(gpu, gp, lines[n], lines[n + 1], lines[n + 2])
    n += 3
    host = sample.get("node")
    for i, (name, key, factor, _) in enumerate(NODE_GAUGES):
        value = _number(host.get(key)) if isinstance(host, Mapping) else None
        if value is not None:
            lines[n + i].append(f"{name}{{{prefix}}} {_go(value * factor)}\n")
    n += len(NODE_GAUGES)
    for peer in sample.get("peers") or ():
        value = _number(peer.get("rtt_s")) if isinstance(peer, Mapping) else None
        if value is not None:
            rank = _escape(str(peer.get("node_rank")))
            lines[n].append(f'{FAMILIES[n][0]}{{{prefix},peer_rank="{rank}"}} {_go(value)}\n')
    source = str(sample.get("gpu_source") or "none")
    available = 1.0 if source != "none" and gpus else 0.0
    lines[n + 1].append(f'{FAMILIES[n + 1][0]}{{{prefix},source="{_escape(source)}"}} '
                        f"{_go(available)}\n")  # fmt: skip
    lines[n + 2].append(f"{FAMILIES[n + 2][0]}{{{prefix}}} {_go(latest.at)}\n")
    n += 3
    train = sample.get("train")
    checkpoint_at = None
    if isinstance(train, Mapping):
        for i, (name, key, _) in enumerate(TRAIN_GAUGES):
            if (value := _number(train.get(key))) is not None:
                lines[n + i].append(f"{name}{{{prefix}}} {_go(value)}\n")
        checkpoint_at = _number(train.get("checkpoint_at"))
    texts = ["".join(out).encode() for out in lines]
    ends = tuple(accumulate(len(text) for text in texts))
    return _Piece(labels, latest, lz4.frame.compress(b"".join(texts)), ends, checkpoint_at)


def _gpu_lines(
    gpu: Mapping[str, Any], prefix: str, throttled: list[str], ecc: list[str], xid: list[str]
) -> None:
    active = [str(r) for r in gpu.get("throttle_reasons") or ()]
    for reason in dict.fromkeys([*THROTTLE_REASONS, *active]):
        value = "1.0" if reason in active else "0.0"
        throttled.append(f'gpulease_gpu_throttled{{{prefix},reason="{_escape(reason)}"}} {value}\n')
    for kind in ("corrected", "uncorrected"):
        if (count := _number(gpu.get(f"ecc_errors_{kind}"))) is not None:
            ecc.append(f'gpulease_gpu_ecc_errors_total{{{prefix},kind="{kind}"}} {_go(count)}\n')
    if (count := _number(gpu.get("xid_errors"))) is not None:
        xid.append(f"gpulease_gpu_xid_errors_total{{{prefix}}} {_go(count)}\n")


def _escape(value: str) -> str:
    """A label value as the text format writes it (backslash, newline and quote escaped)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _go(value: float) -> str:
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class _Histogram(Collector):
    def __init__(self, times: PassTimes) -> None:
        self.times = times

    def collect(self) -> Iterator[Metric]:
        yield _relay_histogram(self.times)


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
