"""One window of the spot/on-demand decision problem, simulated tick by tick.

Owns the exact rules (issue 5) shared by every online policy, the exact optimum
(:mod:`gpulease.spot.optimal`) and the evaluation (:mod:`gpulease.spot.evaluate`):

* at the start of tick ``t`` the policy sees an :class:`~gpulease.spot.sim.Observation` (the mode of
  the previous tick, turned to IDLE when spot is unavailable now — a preemption; whether spot is
  available now; progress; ``t·gap``; the pending changeover; C, D, d, gap) and returns a mode;
  SPOT while spot is unavailable counts as IDLE;
* choosing SPOT or ON_DEMAND when the previous mode differs sets the pending changeover to ``d``
  (replacing any still pending); a non-idle tick adds ``min(max(0, gap − pending), C − progress)``
  to progress, then pending becomes ``max(0, pending − gap)``; an idle tick clears it (the next
  start pays a fresh ``d`` anyway);
* every non-idle tick is billed in full at its mode's price (``price × gap / 3600``), also the tick
  in which the job finishes;
* the job must finish within ``floor(D / gap)`` ticks, else the window is a miss (its cost so far
  still counts);
* the cost ratio divides by the all-on-demand cost ``ceil((C + d) / gap) × gap / 3600 × od_price``.

The simulator holds the availability of the whole window: a policy never sees the future.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpulease.spot.sim import Mode, Observation, Policy

_EPS = 1e-9
_IDLE = Mode.IDLE
_SPOT = Mode.SPOT
_ON_DEMAND = Mode.ON_DEMAND

Availability = Sequence[bool] | npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class WindowResult:
    """The outcome of one window: cost in dollars, cost over the all-on-demand baseline, whether
    the job finished (``miss`` is its negation), billed seconds per mode and ticks used."""

    cost: float
    cost_ratio: float
    finished: bool
    miss: bool
    spot_s: float
    on_demand_s: float
    ticks: int


def floor_ticks(seconds: float, gap_s: float) -> int:
    """``floor(seconds / gap)``, robust to float noise (80 h / 600 s is 480, not 479)."""
    return math.floor(seconds / gap_s + _EPS)


def ceil_ticks(seconds: float, gap_s: float) -> int:
    """``ceil(seconds / gap)``, robust to float noise."""
    return math.ceil(seconds / gap_s - _EPS)


def baseline_cost(*, job_s: float, changeover_s: float, gap_s: float, od_price: float) -> float:
    """The all-on-demand cost: ``ceil((C + d) / gap)`` ticks billed at the on-demand price."""
    return ceil_ticks(job_s + changeover_s, gap_s) * gap_s / 3600.0 * od_price


def as_bool_list(available: Availability) -> list[bool]:
    """Availability as a plain list of Python bools (the fastest thing to index in a loop)."""
    if isinstance(available, np.ndarray):
        return [bool(a) for a in available.tolist()]
    return [bool(a) for a in available]


def simulate_window(
    policy: Policy,
    available: Availability,
    *,
    job_s: float,
    deadline_s: float,
    changeover_s: float,
    gap_s: float,
    od_price: float,
    spot_price: float,
    baseline: float | None = None,
) -> WindowResult:
    """Run ``policy`` over one window; ``available[t]`` says whether spot can be had in tick ``t``.

    ``available`` must cover at least ``floor(deadline / gap)`` ticks. ``baseline`` (the
    all-on-demand cost) may be passed in to skip recomputing it for every window.
    """
    horizon = floor_ticks(deadline_s, gap_s)
    avail = available if isinstance(available, list) else as_bool_list(available)
    if len(avail) < horizon:
        raise ValueError(f"availability covers {len(avail)} ticks, the deadline needs {horizon}")
    if baseline is None:
        baseline = baseline_cost(
            job_s=job_s, changeover_s=changeover_s, gap_s=gap_s, od_price=od_price
        )
    policy.reset()
    finished, ticks, spot_ticks, od_ticks = _run(
        policy,
        avail,
        horizon,
        job_s=job_s,
        deadline_s=deadline_s,
        changeover_s=changeover_s,
        gap_s=gap_s,
    )
    cost = (spot_ticks * spot_price + od_ticks * od_price) * gap_s / 3600.0
    return WindowResult(
        cost=cost,
        cost_ratio=cost / baseline if baseline > 0 else math.nan,
        finished=finished,
        miss=not finished,
        spot_s=spot_ticks * gap_s,
        on_demand_s=od_ticks * gap_s,
        ticks=ticks,
    )


def _run(
    policy: Policy,
    avail: list[bool],
    horizon: int,
    *,
    job_s: float,
    deadline_s: float,
    changeover_s: float,
    gap_s: float,
) -> tuple[bool, int, int, int]:
    """The tick loop: (finished, ticks used, spot ticks, on-demand ticks)."""
    decide = policy.decide
    prev = _IDLE
    progress = pending = 0.0
    spot_ticks = od_ticks = 0
    if job_s <= 0:
        return True, 0, 0, 0
    for t in range(horizon):
        up = avail[t]
        if prev is _SPOT and not up:
            prev = _IDLE
            pending = 0.0
        mode = decide(
            Observation(
                t, prev, up, progress, t * gap_s, pending, job_s, deadline_s, changeover_s, gap_s
            )
        )
        if mode is not _SPOT and mode is not _ON_DEMAND and mode is not _IDLE:
            mode = Mode(mode)  # a plain int from a sloppy policy
        if mode is _IDLE or (mode is _SPOT and not up):
            prev = _IDLE
            pending = 0.0
            continue
        if mode is not prev:
            pending = changeover_s
        if mode is _SPOT:
            spot_ticks += 1
        else:
            od_ticks += 1
        prev = mode
        if gap_s > pending:
            progress += gap_s - pending
            if progress >= job_s - _EPS:
                return True, t + 1, spot_ticks, od_ticks
        pending = pending - gap_s if pending > gap_s else 0.0
    return False, horizon, spot_ticks, od_ticks
