"""The telemetry pieces in process: ring buffer, fake GPU script, sampler passes on an injected
clock, host throughput from real psutil counters, NVML absent on this machine."""

from __future__ import annotations

import ctypes
import logging
import threading

import pytest

from gpulease.agent.telemetry import (
    FakeGpuSampler,
    FakeGpuScript,
    HostSampler,
    NoGpus,
    NvmlSampler,
    Sample,
    SampleRing,
    TelemetrySampler,
    metrics_report,
)
from gpulease.agent.telemetry.nvml import throttle_names
from gpulease.agent.telemetry.sample import NodeSample
from gpulease.clock import VirtualClock


def _sample(at: float) -> Sample:
    return Sample(at=at, node=NodeSample())


def test_ring_drops_the_oldest_and_filters_by_time() -> None:
    ring = SampleRing(3)
    for at in range(5):
        ring.append(_sample(float(at)))
    assert [s.at for s in ring.since()] == [2.0, 3.0, 4.0]
    assert [s.at for s in ring.since(3.0)] == [4.0]
    assert ring.since(4.0) == []
    assert len(ring) == 3
    latest = ring.latest()
    assert latest is not None and latest.at == 4.0
    with pytest.raises(ValueError, match="at least one"):
        SampleRing(0)


def test_ring_is_safe_for_concurrent_writers() -> None:
    ring = SampleRing(10_000)

    def write(base: int) -> None:
        for i in range(1000):
            ring.append(_sample(float(base + i)))

    threads = [threading.Thread(target=write, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(s.at for s in ring.since()) == [float(i) for i in range(4000)]


def test_fake_gpus_step_through_their_patterns() -> None:
    script = FakeGpuScript.parse(
        '{"name": "T4", "memory_total_mb": 16000, "power_limit_w": 70, "gpus": ['
        '{"index": 2, "utilization_pct": [90], "memory_pct": [50]},'
        '{"index": 3, "utilization_pct": [0, 100], "memory_pct": [10, 20, 30]}]}'
    )
    fake = FakeGpuSampler(script)
    passes = [fake.sample() for _ in range(4)]
    assert [[g.index for g in p] for p in passes] == [[2, 3]] * 4
    assert [p[0].utilization_pct for p in passes] == [90.0] * 4
    assert [p[1].utilization_pct for p in passes] == [0.0, 100.0, 0.0, 100.0]
    assert [p[1].memory_used_mb for p in passes] == [1600.0, 3200.0, 4800.0, 1600.0]
    gpu = passes[0][0]
    assert gpu.name == "T4 (fake)" and gpu.memory_total_mb == 16000.0
    assert gpu.power_limit_w == 70.0 and gpu.power_w is not None and 0 < gpu.power_w <= 70.0
    assert gpu.xid_errors == 0 and gpu.throttle_reasons == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"gpus": [{"index": 0, "utilization_pct": [120]}]}', r"gpus\[0\]: percentages"),
        ('{"gpus": [{"index": -1}]}', "gpus.0.index"),
        ('{"gpus": [{"index": 0, "utilization_pct": []}]}', "gpus.0.utilization_pct"),
        ('{"memory_total_mb": 0}', "memory_total_mb"),
        ('{"colour": "red"}', "colour"),
        ("not json", "value"),
    ],
)
def test_fake_gpu_script_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FakeGpuScript.parse(text)


def test_sampler_passes_are_stamped_with_the_injected_clock() -> None:
    clock = VirtualClock(1000.0)
    ring = SampleRing(10)
    script = FakeGpuScript.parse('{"gpus": [{"index": 0, "utilization_pct": [25, 75]}]}')
    sampler = TelemetrySampler(ring, FakeGpuSampler(script), clock, interval_s=2.0)
    sampler.open()
    first = sampler.sample_once()
    clock.advance(2.0)
    second = sampler.sample_once()
    assert (first.at, second.at) == (1000.0, 1002.0)
    assert [s.gpus[0].utilization_pct for s in ring.since()] == [25.0, 75.0]
    assert first.gpu_source == "fake"
    report = metrics_report(sampler, 1000.0)
    assert report["sampling"] is True and report["interval_s"] == 2.0
    assert [s["at"] for s in report["samples"]] == [1002.0]
    assert report["samples"][0]["gpus"][0]["utilization_pct"] == 75.0
    assert metrics_report(None, None)["samples"] == []
    with pytest.raises(ValueError, match="> 0"):
        TelemetrySampler(ring, NoGpus(), clock, interval_s=0)


def test_host_throughput_is_a_rate_over_the_injected_clock() -> None:
    clock = VirtualClock()
    host = HostSampler(clock)
    first = host.sample()
    assert first.net_recv_bps is None  # no previous counters yet
    assert first.memory_total_mb is not None and first.memory_total_mb > 0
    assert first.memory_used_mb is not None and 0 < first.memory_used_mb <= first.memory_total_mb
    assert first.cpu_count is not None and first.cpu_count >= 1
    clock.advance(1e6)  # a huge interval: whatever moved, the rate is tiny but defined
    second = host.sample()
    assert second.net_recv_bps is not None and second.net_recv_bps >= 0
    assert second.cpu_pct is not None and 0 <= second.cpu_pct <= 100
    clock.advance(0.0)
    assert host.sample().net_sent_bps is None  # no time passed: no rate


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvml_loadable(), reason="this machine has an NVML library")
def test_without_nvml_one_line_and_node_metrics_still_sampled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """This machine has no libnvidia-ml.so.1: the real pynvml fails to load it."""
    caplog.set_level(logging.INFO, logger="gpulease.agent.telemetry")
    nvml = NvmlSampler()
    sampler = TelemetrySampler(SampleRing(4), nvml, VirtualClock())
    sampler.open()
    sample = sampler.sample_once()
    assert sample.gpus == () and sample.gpu_source == "none"
    assert sample.node.memory_total_mb is not None
    assert nvml.error is not None and nvml.error.startswith("no GPU metrics: ")
    lines = [r for r in caplog.records if "no GPU metrics" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    sampler.stop()


def test_throttle_reason_names() -> None:
    assert throttle_names(0x1) == ()  # idle is not a slowdown
    assert throttle_names(0x20 | 0x4) == ("sw_power_cap", "sw_thermal")
