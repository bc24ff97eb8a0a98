"""The planning side of the ``gpulease`` spot policy: expected-cost-optimal decisions when spot
runs and outages follow the heavy-tailed model of :mod:`gpulease.spot.runs`.

**Planning grid** (:func:`plan_grid`). The plan does not run on the trace's tick but on *steps* of
``Δ = k·gap`` seconds, ``k`` the smallest whole number of ticks with ``Δ ≥ C / JOB_STEPS`` (about
``JOB_STEPS`` steps per job) and ``Δ ≥ d / MAX_PENDING_STEPS`` (a changeover spans at most two
steps): a 48 h job plans in 600 s steps on 600 s, 300 s or 200 s ticks alike, which is what makes
the policy behave the same on a trace resampled to shorter ticks. Progress is counted in units of
``Δ / UNITS_PER_STEP``; a (re)start step gains ``Δ − d`` (a fractional number of units: the value is
interpolated linearly between the two nearest units).

**Decisions** (:func:`decision_table`). Backward dynamic programming over steps under the rules of
:mod:`gpulease.spot.simulate` (a step plays the part of a tick): the state at a step's start is
(spot available now, age bucket of the current run or outage, previous mode with the changeover
still pending, progress) and the value is the *expected* cost to finish, in on-demand steps (a spot
step costs ``spot_ratio``), when runs and outages end at the model's age-dependent rates; finishing
late costs ``BIG``. The ages are the model's buckets merged until each is at least a step wide; a
spell in bucket ``j`` moves to ``j + 1`` with probability ``Δ / width_j`` per step (a phase-type
approximation of its age). Every transition has a probability above zero, so a finite value
means finishing on every path: the decisions are deadline-safe by themselves (on the grid; the
policy still puts the exact :func:`~gpulease.spot.gpulease_policy.is_safe` on top). The table is
indexed by steps *left*, so one solve serves every deadline up to its horizon (rounded up to
``HORIZON_STEP`` steps). Rates are rounded in log space (``RATE_ROUNDING``) so that windows with
nearly the same estimate share one cached table (``CACHE_SIZE``).

The policy does not see prices: the table assumes a spot tick costs ``spot_ratio`` of an on-demand
tick (the ``gpulease spot-sim`` defaults, $0.9731 / $3.06).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from gpulease.spot.runs import AGE_EDGES_S

_EPS = 1e-9

#: Planning steps per job length (at least; fewer when the trace's ticks are longer).
JOB_STEPS = 288
#: A changeover spans at most this many steps.
MAX_PENDING_STEPS = 2
#: Progress units per step.
UNITS_PER_STEP = 2
#: Horizons are rounded up to a multiple of this many steps (one solve serves many deadlines).
HORIZON_STEP = 256
#: Longest horizon planned; beyond it the policy plans for the last MAX_STEPS steps only.
MAX_STEPS = 2048
#: Rates are rounded to a geometric grid with this ratio before solving (table sharing).
RATE_ROUNDING = 1.25
#: Solved tables kept.
CACHE_SIZE = 16
#: Spot tick price ÷ on-demand tick price assumed by the table.
DEFAULT_SPOT_RATIO = 0.9731 / 3.06
#: The value of a state that cannot finish in time.
BIG = 1e9

# Decision codes in the table; on a tie the lowest wins, so an infeasible state says on-demand.
OD, SPOT, IDLE = 0, 1, 2

Int8Array = npt.NDArray[np.int8]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class PlanGrid:
    """The planning grid of one problem (module docstring)."""

    ticks_per_step: int
    step_s: float  # Δ
    unit_s: float  # seconds of progress per unit
    units: int  # K: the job in units
    changeover_s: float
    pendings: tuple[float, ...]  # changeover still due at a step's start: 0, then d − j·Δ > 0
    age_edges_s: tuple[float, ...]  # the model's buckets, merged to be ≥ Δ wide

    def gain(self, pending: float) -> float:
        """Units gained by a non-idle step that starts with ``pending`` due."""
        return max(0.0, self.step_s - pending) / self.unit_s

    def after(self, pending: float) -> int:
        """Index in ``pendings`` of what is still due after the step."""
        rest = max(0.0, pending - self.step_s)
        return min(range(len(self.pendings)), key=lambda i: abs(self.pendings[i] - rest))

    def age_bucket(self, age_s: float) -> int:
        b = 0
        while b + 1 < len(self.age_edges_s) and age_s >= self.age_edges_s[b + 1] - _EPS:
            b += 1
        return b


def plan_grid(job: float, changeover: float, gap: float) -> PlanGrid:
    """The planning grid for a job of ``job`` seconds, changeover ``changeover``, ticks of ``gap``."""
    k = max(
        1,
        math.ceil(job / (JOB_STEPS * gap) - _EPS),
        math.ceil(changeover / (MAX_PENDING_STEPS * gap) - _EPS),
    )
    step = k * gap
    unit = step / UNITS_PER_STEP
    units = max(1, math.ceil(job / unit - _EPS))
    pendings = [0.0]
    rest = changeover - step
    while rest > _EPS:
        pendings.append(rest)
        rest -= step
    edges = [0.0]
    for edge in AGE_EDGES_S[1:]:
        if edge - edges[-1] >= step - _EPS:
            edges.append(edge)
    return PlanGrid(k, step, unit, units, changeover, tuple(pendings), tuple(edges))


def merged_rates(rates: Sequence[Sequence[float]], grid: PlanGrid) -> list[list[float]]:
    """The model's per-bucket rates (ends per second) on the grid's merged buckets: each merged
    bucket averages its fine buckets weighted by width (the last one is open-ended: its own)."""
    fine = AGE_EDGES_S
    out = []
    for row in rates:
        merged = []
        for j, lo in enumerate(grid.age_edges_s):
            hi = grid.age_edges_s[j + 1] if j + 1 < len(grid.age_edges_s) else math.inf
            members = [b for b, edge in enumerate(fine) if lo - _EPS <= edge < hi - _EPS]
            if math.isinf(hi):
                merged.append(row[members[0]] if len(members) == 1 else row[members[-1]])
                continue
            widths = [min(hi, fine[b + 1] if b + 1 < len(fine) else hi) - fine[b] for b in members]
            merged.append(sum(row[b] * w for b, w in zip(members, widths, strict=True)) / (hi - lo))
        out.append(merged)
    return out


def round_rate(rate: float) -> float:
    """``rate`` rounded to the geometric grid of ratio ``RATE_ROUNDING``."""
    x = math.log(max(rate, 1e-9)) / math.log(RATE_ROUNDING)
    return float(RATE_ROUNDING ** round(x))


@dataclass(frozen=True, slots=True)
class Table:
    """Decisions ``codes[steps_left − 1, state, row, progress_units]``: state = availability·B +
    age bucket (B merged buckets), row = 0 idle, 1 + i spot with ``pendings[i]`` due, 1 + P + i
    on-demand with ``pendings[i]`` due (P pendings); codes ``OD``/``SPOT``/``IDLE``."""

    codes: Int8Array
    grid: PlanGrid

    def decide(
        self, *, time_left: float, spot: bool, age_s: float, prev_mode: int, pending: float,
        progress: float,
    ) -> int:
        """The decision at a real state: ``time_left`` seconds to the deadline (this tick
        included), the current spell's age, the previous mode (0 idle, 1 spot, 2 on-demand) with
        ``pending`` seconds of changeover due, ``progress`` seconds done."""
        grid = self.grid
        steps = math.floor(time_left / grid.step_s + _EPS)
        if steps < 1:
            return OD
        steps = min(steps, self.codes.shape[0])
        buckets = len(grid.age_edges_s)
        state = int(spot) * buckets + grid.age_bucket(age_s)
        row, effective = 0, progress
        if prev_mode != 0:
            # the grid's pending just below the real one; the rest counts as lost progress
            i = max(i for i, p in enumerate(grid.pendings) if p <= pending + _EPS)
            effective -= pending - grid.pendings[i]
            row = 1 + i + (len(grid.pendings) if prev_mode == 2 else 0)
        k = min(grid.units, max(0, round(effective / grid.unit_s)))
        return int(self.codes[steps - 1, state, row, k])


def table_for(
    *,
    job: float,
    deadline: float,
    changeover: float,
    gap: float,
    rates: Sequence[Sequence[float]],
    spot_ratio: float,
) -> Table:
    """The cached decision table for this problem and model (``rates[a][b]``: ends per second of
    an outage (a = 0) or run (a = 1) in the model's age bucket ``b``)."""
    grid = plan_grid(job, changeover, gap)
    horizon = math.floor(deadline / grid.step_s + _EPS)
    rounded = min(MAX_STEPS, max(1, -(-horizon // HORIZON_STEP) * HORIZON_STEP))
    merged = merged_rates(rates, grid)
    key = tuple(tuple(round_rate(r) for r in row) for row in merged)
    return decision_table(grid, rounded, key, spot_ratio)


def _shift(values: FloatArray, gain: float, units: int) -> FloatArray:
    """``values[..., x + gain]`` for every progress ``x`` (linear in between, capped at K)."""
    if gain <= 0:
        return values
    whole = math.floor(gain + _EPS)
    frac = gain - whole
    idx = np.minimum(np.arange(units + 1) + whole, units)
    out = values[..., idx]
    if frac > 1e-6:
        nxt = np.minimum(idx + 1, units)
        out = (1.0 - frac) * out + frac * values[..., nxt]
    return out


@lru_cache(maxsize=CACHE_SIZE)
def decision_table(
    grid: PlanGrid,
    horizon: int,
    rates: tuple[tuple[float, ...], ...],
    spot_ratio: float,
) -> Table:
    """Solve the expected-cost dynamic program backwards over ``horizon`` steps (module doc)."""
    buckets = len(grid.age_edges_s)
    n_states = 2 * buckets
    n_p = len(grid.pendings)
    size = grid.units + 1
    w_stay, w_adv, w_end, adv_to, flip_to = _transitions(grid, rates)
    down = np.arange(n_states) < buckets
    od_base = 1 + n_p
    d = grid.changeover_s
    shape = (n_states, 1 + 2 * n_p, size)
    value = np.full(shape, BIG, dtype=np.float32)
    value[:, :, -1] = 0.0
    codes = np.empty((horizon, *shape), dtype=np.int8)
    on_demand = np.empty(shape, dtype=np.float32)
    spot = np.empty(shape, dtype=np.float32)
    ratio = np.float32(spot_ratio)

    for left in range(horizon):
        ev = w_stay * value + w_adv * value[adv_to] + w_end * value[flip_to]

        def go(base: int, pending: float, ev: FloatArray = ev) -> FloatArray:
            return _shift(ev[:, base + grid.after(pending)], grid.gain(pending), grid.units)

        # on_demand[s, row] / spot[s, row]: the cost of choosing that mode from that row
        od_start = go(od_base, d) + 1.0
        spot_start = go(1, d) + ratio
        on_demand[:, 0] = od_start
        spot[:, 0] = spot_start
        for i, pending in enumerate(grid.pendings):
            on_demand[:, 1 + i] = od_start
            spot[:, 1 + i] = go(1, pending) + ratio
            on_demand[:, od_base + i] = go(od_base, pending) + 1.0
            spot[:, od_base + i] = spot_start
        spot[down] = BIG
        idle = ev[:, :1]
        best = np.minimum(on_demand, spot)
        code = (spot < on_demand).astype(np.int8)
        rest = idle < best
        value = np.where(rest, idle, best)
        code[rest] = IDLE
        value[down, 1 : 1 + n_p] = value[down, :1]  # spot chosen but gone: preempted → idle
        code[down, 1 : 1 + n_p] = code[down, :1]
        value[:, :, -1] = 0.0
        codes[left] = code
    return Table(codes=codes, grid=grid)


def _transitions(
    grid: PlanGrid, rates: tuple[tuple[float, ...], ...]
) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Per state (availability·B + age bucket): the weights of staying in its bucket, moving to
    the next one, and the spell ending (to bucket 0 of the other availability), with the targets."""
    buckets = len(grid.age_edges_s)
    n_states = 2 * buckets
    p_end = np.empty(n_states)
    p_adv = np.zeros(n_states)
    adv_to = np.arange(n_states)
    flip_to = np.empty(n_states, dtype=np.intp)
    for a in (0, 1):
        for j in range(buckets):
            s = a * buckets + j
            p_end[s] = 1.0 - math.exp(-rates[a][j] * grid.step_s)
            flip_to[s] = (1 - a) * buckets
            if j + 1 < buckets:
                width = grid.age_edges_s[j + 1] - grid.age_edges_s[j]
                p_adv[s] = min(1.0, grid.step_s / width)
                adv_to[s] = s + 1

    def weight(x: FloatArray) -> FloatArray:
        return x.astype(np.float32)[:, None, None]

    return (
        weight((1 - p_end) * (1 - p_adv)),
        weight((1 - p_end) * p_adv),
        weight(p_end),
        adv_to,
        flip_to,
    )
