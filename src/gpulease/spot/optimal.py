"""The exact omniscient optimum of one window: the bound no online policy beats.

Backward dynamic programming over ticks under exactly the rules of
:mod:`gpulease.spot.simulate`. The state at the start of a tick is the previous mode (idle, spot,
on-demand), the changeover still pending (``max(0, d − j·gap)`` for ``j ≥ 1``: several values when
``d > gap``, only 0 otherwise) and the progress in units of ``u = gcd(gap, d, C)`` (``K = C / u``
of them); the value is the least cost to finish by the deadline (``inf`` when impossible). Each
tick is a handful of numpy operations over the whole progress axis, and the decisions are kept
(one byte per state) so the best schedule can be replayed through the simulator, which yields the
billed hours and checks the optimum against the rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from gpulease.spot.sim import Mode, Observation
from gpulease.spot.simulate import (
    Availability,
    WindowResult,
    as_bool_list,
    baseline_cost,
    floor_ticks,
    simulate_window,
)

#: Seconds are resolved to this many parts before taking the gcd (1 ms).
_RESOLUTION = 1000
#: Past this many progress units the table would not fit comfortably in memory.
MAX_UNITS = 1_000_000

_IDLE, _SPOT, _OD = int(Mode.IDLE), int(Mode.SPOT), int(Mode.ON_DEMAND)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class _Grid:
    unit: int  # in 1/_RESOLUTION seconds
    units: int  # K: progress units in the job
    gap: int  # in 1/_RESOLUTION seconds
    changeover: int  # d, in 1/_RESOLUTION seconds
    pendings: tuple[int, ...]  # pending values at a tick's start, 0 first

    def gain(self, pending: int) -> int:
        """Progress units one non-idle tick adds when ``pending`` is due at its start."""
        return max(0, self.gap - pending) // self.unit

    def after(self, pending: int) -> int:
        """Index in ``pendings`` of what is still pending after the tick."""
        return self.pendings.index(max(0, pending - self.gap))


def _to_int(seconds: float, what: str) -> int:
    scaled = seconds * _RESOLUTION
    value = round(scaled)
    if abs(scaled - value) > 1e-6 * max(1.0, abs(scaled)) or value < 0:
        raise ValueError(f"{what} must be a non-negative multiple of 1 ms, got {seconds!r} s")
    return value


def _grid(job_s: float, changeover_s: float, gap_s: float) -> _Grid:
    job, d, gap = (
        _to_int(job_s, "job"),
        _to_int(changeover_s, "changeover"),
        _to_int(gap_s, "gap"),
    )
    if gap <= 0:
        raise ValueError("gap must be positive")
    unit = math.gcd(math.gcd(gap, d), job) or gap
    units = job // unit
    if units > MAX_UNITS:
        raise ValueError(
            f"job, changeover and tick length share only a {unit / _RESOLUTION:g} s unit: "
            f"{units} progress units is too many for the exact optimum (at most {MAX_UNITS})"
        )
    pendings = [0] + [d - j * gap for j in range(1, d // gap + 1) if d - j * gap > 0]
    return _Grid(unit, units, gap, d, tuple(pendings))


def _shift(values: FloatArray, gain: int) -> FloatArray:
    """``values[min(k + gain, K)]`` for every progress ``k``."""
    if gain <= 0:
        return values
    out = np.empty_like(values)
    n = len(values)
    if gain < n:
        out[: n - gain] = values[gain:]
        out[n - gain :] = values[-1]
    else:
        out[:] = values[-1]
    return out


class _Schedule:
    """Replays the decisions the DP kept (an omniscient 'policy' for the simulator)."""

    name = "optimal"

    def __init__(self, grid: _Grid, choices: list[npt.NDArray[np.int8]]) -> None:
        self._grid = grid
        self._choices = choices
        self._index = {p: i for i, p in enumerate(grid.pendings)}

    def reset(self) -> None:
        return None

    def decide(self, obs: Observation) -> Mode:
        grid = self._grid
        k = round(obs.progress * _RESOLUTION) // grid.unit
        pending = self._index.get(round(obs.pending * _RESOLUTION), 0)
        row = _row(int(obs.prev_mode), pending, len(grid.pendings))
        return Mode(int(self._choices[obs.tick][row, k]))


def _row(mode: int, pending_index: int, n_pending: int) -> int:
    """Row of a (mode, pending) state: 0 idle, then spot rows, then on-demand rows."""
    if mode == _IDLE:
        return 0
    return 1 + pending_index + (n_pending if mode == _OD else 0)


def _pick(
    candidates: list[tuple[int, FloatArray]], size: int
) -> tuple[FloatArray, npt.NDArray[np.int8]]:
    """Elementwise minimum of the candidates and which one won (earlier wins ties)."""
    best = candidates[0][1].copy()
    choice = np.full(size, candidates[0][0], dtype=np.int8)
    for code, values in candidates[1:]:
        better = values < best
        np.copyto(best, values, where=better)
        choice[better] = code
    return best, choice


def solve_window(
    grid: _Grid, avail: list[bool], horizon: int, tick_spot: float, tick_od: float
) -> tuple[float, list[npt.NDArray[np.int8]]]:
    """Backward DP: the least cost from the start state (idle, nothing done; ``inf`` when the job
    cannot finish) and, per tick, the best decision of every (row, progress) state."""
    n_p = len(grid.pendings)
    size = grid.units + 1
    rows = 1 + 2 * n_p
    value = np.full((rows, size), np.inf)
    value[:, -1] = 0.0
    choices: list[npt.NDArray[np.int8]] = [np.empty(0, dtype=np.int8)] * horizon
    od_base, spot_base = 1 + n_p, 1

    def cont(nxt_value: FloatArray, base: int, pending: int, price: float) -> FloatArray:
        nxt = nxt_value[base + grid.after(pending)]
        return _shift(nxt, grid.gain(pending)) + price

    for t in range(horizon - 1, -1, -1):
        up = avail[t]
        new = np.empty_like(value)
        table = np.empty((rows, size), dtype=np.int8)
        idle_next = value[0]
        switch_od = cont(value, od_base, grid.changeover, tick_od)
        base: list[tuple[int, FloatArray]] = [(_IDLE, idle_next)]
        if up:
            switch_spot = cont(value, spot_base, grid.changeover, tick_spot)
            base.append((_SPOT, switch_spot))
        new[0], table[0] = _pick([*base, (_OD, switch_od)], size)
        for i, pending in enumerate(grid.pendings):
            stay_od = cont(value, od_base, pending, tick_od)
            new[od_base + i], table[od_base + i] = _pick([*base, (_OD, stay_od)], size)
            if up:
                stay_spot = cont(value, spot_base, pending, tick_spot)
                cands = [(_IDLE, idle_next), (_SPOT, stay_spot), (_OD, switch_od)]
                new[spot_base + i], table[spot_base + i] = _pick(cands, size)
            else:  # preempted: the same as idle
                new[spot_base + i], table[spot_base + i] = new[0], table[0]
        new[:, -1] = 0.0
        value = new
        choices[t] = table
    return float(value[0, 0]), choices


def optimal_cost(
    available: Availability,
    *,
    job_s: float,
    deadline_s: float,
    changeover_s: float,
    gap_s: float,
    od_price: float,
    spot_price: float,
) -> WindowResult:
    """The least cost of any schedule that finishes by the deadline, knowing the whole window.

    When no schedule can finish (the deadline does not even allow all-on-demand), the result is a
    miss with the all-on-demand run's cost so far.
    """
    from gpulease.spot.policies import OnDemand

    horizon = floor_ticks(deadline_s, gap_s)
    avail = as_bool_list(available)
    if len(avail) < horizon:
        raise ValueError(f"availability covers {len(avail)} ticks, the deadline needs {horizon}")
    kwargs = {
        "job_s": job_s,
        "deadline_s": deadline_s,
        "changeover_s": changeover_s,
        "gap_s": gap_s,
        "od_price": od_price,
        "spot_price": spot_price,
    }
    baseline = baseline_cost(job_s=job_s, changeover_s=changeover_s, gap_s=gap_s, od_price=od_price)
    grid = _grid(job_s, changeover_s, gap_s)
    value, choices = solve_window(
        grid, avail, horizon, spot_price * gap_s / 3600.0, od_price * gap_s / 3600.0
    )
    if not math.isfinite(value):
        return simulate_window(OnDemand(), avail, baseline=baseline, **kwargs)
    result = simulate_window(_Schedule(grid, choices), avail, baseline=baseline, **kwargs)
    if result.miss or not math.isclose(result.cost, value, rel_tol=1e-9, abs_tol=1e-9):
        raise AssertionError(f"optimal schedule replays to {result}, expected cost {value}")
    return replace(result, cost=value, cost_ratio=value / baseline if baseline > 0 else math.nan)
