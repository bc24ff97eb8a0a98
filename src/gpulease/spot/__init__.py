"""Spot capacity over time: availability traces (the spot-traces JSON format), and later the
deadline-aware spot/on-demand policies and their simulator (shared by the controller and
``gpulease spot-sim``)."""

from __future__ import annotations

from gpulease.spot.traces import Trace, generate_trace, load_trace, write_trace

__all__ = ["Trace", "generate_trace", "load_trace", "write_trace"]
