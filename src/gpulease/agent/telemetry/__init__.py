"""Node telemetry, sampled by the agent: GPUs (NVML, or the local provider's fake GPUs) and
the host (psutil) every few seconds into a bounded ring buffer served by ``GET /v1/metrics``.

Modules: ``sample`` (the shapes and their JSON), ``ring`` (the buffer), ``host`` (psutil),
``nvml`` (pynvml), ``fake`` (scripted fake GPUs), ``train`` (the job's stats file), ``peers``
(round trips to the other nodes' agents), ``sampler`` (the thread). See
``docs/agent.md#telemetry``.
"""

from __future__ import annotations

from gpulease.agent.telemetry.fake import FakeGpuSampler, FakeGpuScript
from gpulease.agent.telemetry.host import HostSampler
from gpulease.agent.telemetry.nvml import NvmlSampler
from gpulease.agent.telemetry.peers import Peer, PeerProber
from gpulease.agent.telemetry.ring import SampleRing
from gpulease.agent.telemetry.sample import GpuSample, NodeSample, PeerRtt, Sample
from gpulease.agent.telemetry.sampler import (
    DEFAULT_CAPACITY,
    DEFAULT_INTERVAL_S,
    GpuSource,
    NoGpus,
    TelemetrySampler,
    metrics_report,
)
from gpulease.agent.telemetry.train import TrainStatsReader, parse_train_stats

__all__ = [
    "DEFAULT_CAPACITY",
    "DEFAULT_INTERVAL_S",
    "FakeGpuSampler",
    "FakeGpuScript",
    "GpuSample",
    "GpuSource",
    "HostSampler",
    "NoGpus",
    "NodeSample",
    "NvmlSampler",
    "Peer",
    "PeerProber",
    "PeerRtt",
    "Sample",
    "SampleRing",
    "TelemetrySampler",
    "TrainStatsReader",
    "metrics_report",
    "parse_train_stats",
]
