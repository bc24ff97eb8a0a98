"""Spot capacity over time: availability traces (the spot-traces JSON format), the spot/on-demand
decision problem (modes, observations, the policy protocol), the baseline policies, the window
simulator, the exact optimum and the evaluation behind ``gpulease spot-sim`` (shared by the
controller and the CLI)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.spot.sim import Mode, Observation, Policy
from gpulease.spot.traces import Trace, generate_trace, load_trace, write_trace

if TYPE_CHECKING:
    from gpulease.spot.evaluate import Cell, run_spot_sim, window_starts
    from gpulease.spot.optimal import optimal_cost
    from gpulease.spot.policies import (
        POLICIES,
        POLICY_NAMES,
        Greedy,
        OnDemand,
        UniformProgress,
        make_policy,
        safety_net,
    )
    from gpulease.spot.simulate import WindowResult, baseline_cost, simulate_window

# The simulator side needs numpy: load it only when used (the sim provider only needs traces).
_LAZY = {
    "Cell": "evaluate",
    "run_spot_sim": "evaluate",
    "window_starts": "evaluate",
    "optimal_cost": "optimal",
    "POLICIES": "policies",
    "POLICY_NAMES": "policies",
    "Greedy": "policies",
    "OnDemand": "policies",
    "UniformProgress": "policies",
    "make_policy": "policies",
    "safety_net": "policies",
    "WindowResult": "simulate",
    "baseline_cost": "simulate",
    "simulate_window": "simulate",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpulease.spot' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"gpulease.spot.{module}"), name)


__all__ = [
    "POLICIES",
    "POLICY_NAMES",
    "Cell",
    "Greedy",
    "Mode",
    "Observation",
    "OnDemand",
    "Policy",
    "Trace",
    "UniformProgress",
    "WindowResult",
    "baseline_cost",
    "generate_trace",
    "load_trace",
    "make_policy",
    "optimal_cost",
    "run_spot_sim",
    "safety_net",
    "simulate_window",
    "window_starts",
    "write_trace",
]
