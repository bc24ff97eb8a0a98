"""The baseline online policies (on_demand, greedy, uniform_progress), the deadline safety net they
share, and the registry of policy names used by ``gpulease spot-sim``.

``gpulease`` (:class:`gpulease.spot.gpulease_policy.GpuleasePolicy`) is imported lazily by name;
``optimal`` is not an online policy (it sees the whole window) and is handled by the evaluation.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable

from gpulease.errors import UserInputError
from gpulease.spot.sim import Mode, Observation, Policy

_EPS = 1e-9

#: Every name ``gpulease spot-sim --policy`` accepts, in display order.
POLICY_NAMES: tuple[str, ...] = ("on_demand", "greedy", "uniform_progress", "gpulease", "optimal")
#: The one name that is not an online policy.
OPTIMAL = "optimal"


def _ceil_to_ticks(seconds: float, gap: float) -> float:
    return math.ceil(seconds / gap - _EPS) * gap


def safety_net(obs: Observation, proposal: Mode) -> Mode:
    """Override ``proposal`` when waiting longer could miss the deadline.

    With ``R = floor((D − t·gap) / gap) × gap`` and ``rem = C − progress``: if
    ``ceil((rem + 2d) / gap) × gap ≥ R`` and the previous mode is idle or on-demand → on-demand;
    then if ``ceil((rem + d) / gap) × gap ≥ R`` → spot if the previous mode is spot with no pending
    changeover, else on-demand (with ``d = 0`` and spot available → spot).
    """
    gap = obs.gap
    left = math.floor((obs.deadline - obs.elapsed) / gap + _EPS) * gap
    rem = obs.job - obs.progress
    d = obs.changeover
    prev = obs.prev_mode
    if prev is not Mode.SPOT and _ceil_to_ticks(rem + 2 * d, gap) >= left:
        return Mode.ON_DEMAND
    if _ceil_to_ticks(rem + d, gap) >= left:
        if prev is Mode.SPOT and obs.pending <= 0:
            return Mode.SPOT
        if d <= 0 and obs.spot_available:
            return Mode.SPOT
        return Mode.ON_DEMAND
    return proposal


class OnDemand:
    """Always on-demand: never misses when the deadline allows it, costs the baseline."""

    name = "on_demand"

    def reset(self) -> None:
        return None

    def decide(self, obs: Observation) -> Mode:
        return Mode.ON_DEMAND


class Greedy:
    """Spot whenever it is available, idle otherwise, until the safety net forces on-demand."""

    name = "greedy"

    def reset(self) -> None:
        return None

    def decide(self, obs: Observation) -> Mode:
        return safety_net(obs, Mode.SPOT if obs.spot_available else Mode.IDLE)


class UniformProgress:
    """Keep progress on the straight line ``t·gap·C/D``: spot when available; on-demand when behind
    the line and spot is out; stay on on-demand (hysteresis) until spot is back and progress is
    ahead of where the line will be two changeovers later; then the safety net."""

    name = "uniform_progress"

    def reset(self) -> None:
        return None

    def decide(self, obs: Observation) -> Mode:
        up = obs.spot_available
        rate = obs.job / obs.deadline
        proposal = Mode.SPOT if up else Mode.IDLE
        if obs.progress < obs.elapsed * rate:
            proposal = Mode.SPOT if up else Mode.ON_DEMAND
        if obs.prev_mode is Mode.ON_DEMAND and (
            not up or (obs.elapsed + 2 * obs.changeover) * rate >= obs.progress
        ):
            proposal = Mode.ON_DEMAND
        return safety_net(obs, proposal)


def _gpulease() -> Policy:
    try:
        module = importlib.import_module("gpulease.spot.gpulease_policy")
    except ModuleNotFoundError as exc:
        if exc.name != "gpulease.spot.gpulease_policy":
            raise
        raise UserInputError(
            "--policy: 'gpulease' is not available in this install "
            "(module gpulease.spot.gpulease_policy is missing)"
        ) from None
    policy: Policy = module.GpuleasePolicy()
    return policy


#: Online policies by name (factories: every window evaluation may get its own instance).
POLICIES: dict[str, Callable[[], Policy]] = {
    "on_demand": OnDemand,
    "greedy": Greedy,
    "uniform_progress": UniformProgress,
    "gpulease": _gpulease,
}


def make_policy(name: str) -> Policy:
    """A fresh online policy by name; an unknown name (or ``optimal``) raises UserInputError."""
    factory = POLICIES.get(name)
    if factory is None:
        hint = " (not an online policy)" if name == OPTIMAL else ""
        raise UserInputError(
            f"--policy: unknown policy {name!r}{hint}; choose from {', '.join(POLICY_NAMES)}"
        )
    return factory()
