"""The shape of one telemetry sample: a node's GPUs and host at one instant.

Owns :class:`GpuSample`, :class:`NodeSample`, :class:`PeerRtt` and :class:`Sample`, and their
JSON form
(``to_json``), which is what ``GET /v1/metrics`` serves and what the server relays. Field names
carry their unit (``_pct``, ``_mb``, ``_w``, ``_c``, ``_mhz``, ``_bps``), so the Prometheus names
built from them later need no table. A figure the source cannot give is ``None`` (JSON ``null``),
never a made-up zero. No states: samples are immutable values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU. ``index`` is the device's index on the node (NVML's, or the fake GPU's number
    in ``CUDA_VISIBLE_DEVICES``); ``throttle_reasons`` are names (``sw_thermal``, ``hw_slowdown``,
    …; empty when the clocks are not held back, ``gpu_idle`` excepted)."""

    index: int
    name: str
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    ecc_errors_corrected: int | None = None
    ecc_errors_uncorrected: int | None = None
    xid_errors: int | None = None  # XID events seen since the agent started sampling
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class NodeSample:
    """The host. Throughputs are bytes per second since the previous sample (``None`` on the
    first one)."""

    cpu_pct: float | None = None
    cpu_count: int | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    disk_read_bps: float | None = None
    disk_write_bps: float | None = None
    net_recv_bps: float | None = None
    net_sent_bps: float | None = None


@dataclass(frozen=True, slots=True)
class PeerRtt:
    """The TCP-connect round trip to another node's agent (``rtt_s`` None: no answer within the
    probe's timeout, or unreachable)."""

    node_rank: int
    rtt_s: float | None


@dataclass(frozen=True, slots=True)
class Sample:
    """One sampling pass: ``at`` is seconds since the epoch on the agent's clock; ``gpu_source``
    says where the GPU figures came from (``nvml``, ``fake`` or ``none``); ``train`` is what
    ``gpulease.train`` last reported (None: nothing recent), ``peers`` the round trips to the
    cluster's other nodes (empty on one node)."""

    at: float
    node: NodeSample
    gpus: tuple[GpuSample, ...] = field(default=())
    gpu_source: str = "none"
    train: dict[str, Any] | None = None
    peers: tuple[PeerRtt, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for gpu in data["gpus"]:
            gpu["throttle_reasons"] = list(gpu["throttle_reasons"])
        data["peers"] = [asdict(p) for p in self.peers]
        return data
