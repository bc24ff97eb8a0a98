"""The server's telemetry: the relay that pulls each live node's agent samples, the history
store (``telemetry_points`` at 10 s and 60 s), the read API's views and the relayed Prometheus
series. See docs/metrics.md.

Modules: ``settings`` (``server.telemetry``), ``fold`` (pure bucket folding), ``store`` (the
table's upserts, pruning and reads), ``latest`` (each node's newest raw sample, in memory),
``reads`` (the read API's views), ``relay`` (the loop), ``prom`` (the relayed ``/metrics`` text).
"""

from gpulease.server.telemetry.latest import LatestSamples
from gpulease.server.telemetry.reads import TelemetryReader
from gpulease.server.telemetry.settings import TelemetrySettings, telemetry_settings

__all__ = ["LatestSamples", "TelemetryReader", "TelemetrySettings", "telemetry_settings"]
