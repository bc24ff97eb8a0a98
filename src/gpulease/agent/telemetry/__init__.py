"""Node telemetry, sampled by the agent: GPUs (NVML, or the local provider's fake GPUs) and
the host (psutil) every few seconds into a bounded ring buffer served by ``GET /v1/metrics``.

Modules: ``sample`` (the shapes and their JSON), ``ring`` (the buffer), ``host`` (psutil),
``nvml`` (pynvml), ``fake`` (scripted fake GPUs), ``sampler`` (the thread). See
``docs/agent.md#telemetry``.
"""

from __future__ import annotations

from gpulease.agent.telemetry.fake import FakeGpuSampler, FakeGpuScript
from gpulease.agent.telemetry.host import HostSampler
from gpulease.agent.telemetry.nvml import NvmlSampler
from gpulease.agent.telemetry.ring import SampleRing
from gpulease.agent.telemetry.sample import GpuSample, NodeSample, Sample
from gpulease.agent.telemetry.sampler import (
    DEFAULT_CAPACITY,
    DEFAULT_INTERVAL_S,
    GpuSource,
    NoGpus,
    TelemetrySampler,
    metrics_report,
)

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
    "Sample",
    "SampleRing",
    "TelemetrySampler",
    "metrics_report",
]
