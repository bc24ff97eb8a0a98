"""Host metrics through ``psutil``: CPU, memory, disk and network throughput.

Owns the previous counters (disk and network bytes) and the time they were read, so each
:meth:`HostSampler.sample` turns counter deltas into bytes per second over the injected clock.
Counters that go backwards (a device removed, a wrap) give ``None`` for that pass, not a negative
rate. A counter psutil cannot read here (no block devices in a container) is ``None``.
"""

from __future__ import annotations

import logging

import psutil

from gpulease.agent.telemetry.sample import NodeSample
from gpulease.clock import Clock

log = logging.getLogger("gpulease.agent.telemetry")

_MB = 1_000_000.0


class HostSampler:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._previous: tuple[float, dict[str, int]] | None = None
        psutil.cpu_percent(interval=None)  # the first call only starts psutil's interval

    def sample(self) -> NodeSample:
        memory = psutil.virtual_memory()
        now = self._clock.now()
        counters = _counters()
        rates = self._rates(now, counters)
        self._previous = (now, counters)
        return NodeSample(
            cpu_pct=float(psutil.cpu_percent(interval=None)),
            cpu_count=psutil.cpu_count(),
            memory_used_mb=(memory.total - memory.available) / _MB,
            memory_total_mb=memory.total / _MB,
            disk_read_bps=rates.get("disk_read"),
            disk_write_bps=rates.get("disk_write"),
            net_recv_bps=rates.get("net_recv"),
            net_sent_bps=rates.get("net_sent"),
        )

    def _rates(self, now: float, counters: dict[str, int]) -> dict[str, float]:
        if self._previous is None:
            return {}
        then, before = self._previous
        elapsed = now - then
        if elapsed <= 0:
            return {}
        rates = {}
        for name, value in counters.items():
            old = before.get(name)
            if old is not None and value >= old:
                rates[name] = (value - old) / elapsed
        return rates


def _counters() -> dict[str, int]:
    counters: dict[str, int] = {}
    try:
        disk = psutil.disk_io_counters()
    except (OSError, RuntimeError):  # no /proc/diskstats here
        disk = None
    if disk is not None:
        counters["disk_read"] = disk.read_bytes
        counters["disk_write"] = disk.write_bytes
    try:
        net = psutil.net_io_counters()
    except (OSError, RuntimeError):
        net = None
    if net is not None:
        counters["net_recv"] = net.bytes_recv
        counters["net_sent"] = net.bytes_sent
    return counters
