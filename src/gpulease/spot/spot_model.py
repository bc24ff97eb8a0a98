"""The learned side of the ``gpulease`` spot policy: an online estimate of the window's spot
availability as a two-state Markov chain, and the expected-cost-optimal decisions under that chain.

**Estimate** (:class:`MarkovEstimate`). From the availability the policy has seen so far in the
window — and nothing else: no look-ahead, no other window — count the transitions up→down and
down→up and blend them with a prior of ``PRIOR_WEIGHT`` pseudo-ticks (half up, half down) of a chain
with availability ``PRIOR_AVAILABILITY`` and mean run ``PRIOR_RUN_TICKS``:
``q = P(up → down) = (n_ud + q0·w/2) / (n_u + w/2)``, ``r = P(down → up)`` likewise. Both are then
rounded (in log space) to the nearest of ``LEVELS`` so that windows with similar estimates share one
solved table.

**Decisions** (:func:`decision_table`). Backward dynamic programming over ticks under exactly the
issue-5 rules of :mod:`gpulease.spot.simulate`, for a changeover ``d < gap`` (a (re)start costs one
tick's progress ``gap − d``, nothing pending afterwards): the state at a tick's start is (spot
available now, previous mode, progress in units of ``u = gcd(gap, d, C)``) and the value is the
*expected* cost to finish, in on-demand ticks, when the next tick's availability follows the chain;
finishing late costs ``inf``. Because every transition of the chain has a probability > 0, a finite
value means finishing on every availability path, so the decisions are deadline-safe by themselves
(the policy still puts :func:`~gpulease.spot.gpulease_policy.is_safe` on top). The table is indexed
by ticks *left*, so one solve serves every deadline up to its horizon (rounded up to
``HORIZON_STEP`` ticks). About 0.1 s per solve for a 48 h job with 600 s ticks; solves are cached.

The policy does not see prices: the table assumes a spot tick costs ``spot_ratio`` of an on-demand
tick (the ``gpulease spot-sim`` defaults, $0.9731 / $3.06).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

_EPS = 1e-9

#: Transition probabilities are rounded (in log space) to one of these.
LEVELS: tuple[float, ...] = (0.01, 0.02, 0.035, 0.06, 0.1, 0.15, 0.22, 0.32, 0.45, 0.6, 0.8)
_LOG_LEVELS = [math.log(level) for level in LEVELS]
#: The prior chain: as likely up as down, runs of four ticks on average …
PRIOR_AVAILABILITY = 0.5
PRIOR_RUN_TICKS = 4.0
#: … worth this many observed ticks (four hours of 600 s ticks).
PRIOR_WEIGHT = 24.0
#: Largest progress axis and horizon solved; beyond them the policy uses its schedule rules.
MAX_UNITS = 3000
MAX_TICKS = 2048
#: Horizons are rounded up to a multiple of this (one solve serves many deadlines).
HORIZON_STEP = 256
#: Spot tick price ÷ on-demand tick price assumed by the table.
DEFAULT_SPOT_RATIO = 0.9731 / 3.06

# Decision codes in the table; on a tie the lowest wins, so an infeasible state says on-demand.
OD, SPOT, IDLE = 0, 1, 2

Int8Array = npt.NDArray[np.int8]
FloatArray = npt.NDArray[np.float64]


def level(p: float) -> float:
    """The entry of ``LEVELS`` nearest to ``p`` in log space."""
    x = math.log(max(p, 1e-6))
    best = min(range(len(LEVELS)), key=lambda i: abs(_LOG_LEVELS[i] - x))
    return LEVELS[best]


class MarkovEstimate:
    """Transition counts of the availability seen so far in one window (see the module doc)."""

    def __init__(self) -> None:
        self.counts = [[0, 0], [0, 0]]  # counts[from][to], 0 = down, 1 = up

    def observe(self, before: bool, now: bool) -> None:
        """One tick-to-tick transition of availability."""
        self.counts[int(before)][int(now)] += 1

    def chain(self) -> tuple[float, float]:
        """``(q, r)`` = (P(up → down), P(down → up)) rounded to ``LEVELS``."""
        q0 = 1.0 / PRIOR_RUN_TICKS
        r0 = q0 * PRIOR_AVAILABILITY / (1.0 - PRIOR_AVAILABILITY)
        half = PRIOR_WEIGHT / 2.0
        up, down = self.counts[1], self.counts[0]
        q = (up[0] + q0 * half) / (up[0] + up[1] + half)
        r = (down[1] + r0 * half) / (down[0] + down[1] + half)
        return level(q), level(r)


@dataclass(frozen=True, slots=True)
class Table:
    """Decisions ``codes[ticks_left − 1, spot_available, prev_mode, progress_units]`` (prev_mode:
    0 idle, 1 spot, 2 on-demand; codes ``OD``/``SPOT``/``IDLE``)."""

    codes: Int8Array
    unit: float  # seconds of progress per unit
    units: int  # K: the job in units

    def decide(self, ticks_left: int, spot: bool, prev_mode: int, progress: float) -> int:
        if ticks_left < 1 or ticks_left > self.codes.shape[0]:
            return OD
        k = min(self.units, math.floor(progress / self.unit + 1e-6))
        return int(self.codes[ticks_left - 1, int(spot), prev_mode, k])


def progress_unit(job: float, changeover: float, gap: float) -> float | None:
    """``gcd(gap, d, C)`` (ms resolution), coarsened by doubling while the job has more than
    ``MAX_UNITS`` of them; ``None`` when that would make a unit coarser than a quarter tick."""
    parts = [round(x * 1000) for x in (job, changeover, gap) if x > 0]
    g = 0
    for part in parts:
        g = math.gcd(g, part)
    if g <= 0:
        return None
    unit = g / 1000.0
    while job / unit > MAX_UNITS:
        unit *= 2
        if unit > gap / 4:
            return None
    return unit


def table_for(
    *,
    job: float,
    deadline: float,
    changeover: float,
    gap: float,
    q: float,
    r: float,
    spot_ratio: float,
) -> Table | None:
    """The cached decision table for this problem and chain, or ``None`` when the problem is out
    of the table's scope (``d ≥ gap``, too long a horizon, too fine a progress axis)."""
    if not 0 <= changeover < gap:
        return None
    horizon = math.floor(deadline / gap + _EPS)
    rounded = -(-horizon // HORIZON_STEP) * HORIZON_STEP
    unit = progress_unit(job, changeover, gap)
    if unit is None or rounded > MAX_TICKS or horizon < 1:
        return None
    return decision_table(job, changeover, gap, unit, rounded, q, r, spot_ratio)


@lru_cache(maxsize=64)
def decision_table(  # noqa: PLR0917 (a cache key)
    job: float,
    changeover: float,
    gap: float,
    unit: float,
    horizon: int,
    q: float,
    r: float,
    spot_ratio: float,
) -> Table:
    """Solve the expected-cost dynamic program backwards over ``horizon`` ticks (module doc)."""
    units = math.ceil(job / unit - _EPS)
    size = units + 1
    stay = math.floor(gap / unit + _EPS)  # units gained by a tick on the mode already running
    start = math.floor((gap - changeover) / unit + _EPS)  # … by a tick that (re)starts a mode
    inf = math.inf
    # value[a, mode, k]: expected cost from a tick's start with availability a, previous mode.
    value = np.full((2, 3, size), inf)
    value[:, :, units] = 0.0
    codes = np.empty((horizon, 2, 3, size), dtype=np.int8)
    move = ((1.0 - r, r), (q, 1.0 - q))  # move[a][a']
    never: FloatArray = np.full(size, inf)
    cols = np.arange(size)

    def shift(arr: FloatArray, gain: int) -> FloatArray:
        if gain <= 0:
            return arr
        gain = min(gain, units)  # a tick can finish the job from anywhere
        out = np.empty_like(arr)
        out[: size - gain] = arr[gain:]
        out[size - gain :] = arr[units]
        return out

    for left in range(1, horizon + 1):
        down = value[0].copy()
        down[1] = down[0]  # spot chosen, spot gone at the next tick: a preemption → idle
        new = np.empty_like(value)
        for a in (0, 1):
            ev = move[a][0] * down + move[a][1] * value[1]
            idle = ev[0]
            start_od = 1.0 + shift(ev[2], start)
            stay_od = 1.0 + shift(ev[2], stay)
            start_spot = spot_ratio + shift(ev[1], start) if a else never
            stay_spot = spot_ratio + shift(ev[1], stay) if a else never
            for mode, cands in (
                (0, (start_od, start_spot, idle)),
                (1, (start_od, stay_spot, idle)),
                (2, (stay_od, start_spot, idle)),
            ):
                stack = np.stack(cands)
                choice = np.argmin(stack, axis=0)
                new[a, mode] = stack[choice, cols]
                codes[left - 1, a, mode] = choice
        new[:, :, units] = 0.0
        value = new
    return Table(codes=codes, unit=unit, units=units)
