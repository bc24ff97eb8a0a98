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
indexed by steps *left*, so one solve serves every deadline and every later refit up to its
horizon (the time left, rounded up to ``HORIZON_STEP`` steps). Rates are rounded in log space
(``RATE_ROUNDING``) so that windows with nearly the same estimate share one cached table
(``CACHE_SIZE``).

The policy does not see prices: the table assumes a spot tick costs ``spot_ratio`` of an on-demand
tick (the ``gpulease spot-sim`` defaults, $0.9731 / $3.06).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

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
#: Horizons are rounded up to a multiple of this many steps (one solve serves many deadlines and
#: every later refit with the same rounded rates).
HORIZON_STEP = 64
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
FloatArray = npt.NDArray[np.float32]


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
    """The planning grid of a ``job``-second job with changeover ``changeover`` on ``gap`` ticks."""
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
        self,
        *,
        time_left: float,
        spot: bool,
        age_s: float,
        prev_mode: int,
        pending: float,
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
    time_left: float,
    changeover: float,
    gap: float,
    rates: Sequence[Sequence[float]],
    spot_ratio: float,
) -> Table:
    """The decision table for this problem and model that covers ``time_left`` seconds
    (``rates[a][b]``: ends per second of an outage (a = 0) or run (a = 1) in the model's age
    bucket ``b``). A cached table for the same grid and rounded rates serves whenever its horizon
    is long enough: the table is indexed by steps *left*, so its decisions do not depend on how far
    back it was solved."""
    grid = plan_grid(job, changeover, gap)
    needed = max(1, math.floor(time_left / grid.step_s + _EPS))
    merged = merged_rates(rates, grid)
    key = (grid, tuple(tuple(round_rate(r) for r in row) for row in merged), spot_ratio)
    table = _TABLES.get(key)
    if table is None or table.codes.shape[0] < min(needed, MAX_STEPS):
        horizon = min(MAX_STEPS, -(-needed // HORIZON_STEP) * HORIZON_STEP)
        table = decision_table(grid, horizon, key[1], spot_ratio)
    _TABLES[key] = table
    _TABLES.move_to_end(key)
    while len(_TABLES) > CACHE_SIZE:
        _TABLES.popitem(last=False)
    return table


#: Solved tables by (grid, rounded rates, spot ratio), least recently used first.
_TABLES: OrderedDict[tuple[PlanGrid, tuple[tuple[float, ...], ...], float], Table] = OrderedDict()


@dataclass(frozen=True, slots=True)
class _Move:
    """Where a choice leads: the row after the step and the progress gained, ``whole + frac``
    units (the value after it is linear in between two units, capped at the job)."""

    row: int
    whole: int
    frac: float


def _moves(grid: PlanGrid) -> tuple[list[_Move], list[int], list[int]]:
    """Every distinct move, and for each row the move that choosing on-demand / spot makes."""
    n_p = len(grid.pendings)
    od_base = 1 + n_p
    index: dict[tuple[int, float], int] = {}

    def move(base: int, pending: float) -> int:
        return index.setdefault((base + grid.after(pending), grid.gain(pending)), len(index))

    d = grid.changeover_s
    od_move = [move(od_base, d)] * (1 + 2 * n_p)
    spot_move = [move(1, d)] * (1 + 2 * n_p)
    for i, pending in enumerate(grid.pendings):
        spot_move[1 + i] = move(1, pending)
        od_move[od_base + i] = move(od_base, pending)
    moves = []
    for row, gain in sorted(index, key=index.__getitem__):
        whole = math.floor(gain + _EPS)
        frac = gain - whole
        moves.append(_Move(row, whole, frac if frac > 1e-6 else 0.0))
    return moves, od_move, spot_move


def _shift_into(out: FloatArray, src: FloatArray, move: _Move) -> None:
    """``out[:, x] = src[:, x + gain]`` (linear between units; at or past the job: the job)."""
    size = src.shape[1]
    w = min(move.whole, size - 1)
    if move.frac == 0.0:
        out[:, : size - w] = src[:, w:]
        out[:, size - w :] = src[:, -1:]
        return
    n = size - w - 1  # x + w + 1 stays within the job for x < n
    out[:, :n] = (
        np.float32(1.0 - move.frac) * src[:, w:-1] + np.float32(move.frac) * src[:, w + 1 :]
    )
    out[:, n:] = src[:, -1:]


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
    moves, od_move, spot_move = _moves(grid)
    shape = (n_states, 1 + 2 * n_p, size)
    value = np.full(shape, BIG, dtype=np.float32)
    value[:, :, -1] = 0.0
    codes = np.empty((horizon, *shape), dtype=np.int8)
    shifted = np.empty((len(moves), n_states, size), dtype=np.float32)
    on_demand = np.empty(shape, dtype=np.float32)
    spot = np.empty(shape, dtype=np.float32)
    ratio = np.float32(spot_ratio)

    for left in range(horizon):
        ev = w_stay * value + w_adv * value[adv_to] + w_end * value[flip_to]
        for m, move in enumerate(moves):
            _shift_into(shifted[m], ev[:, move.row], move)
        # the cost of choosing on-demand / spot from each (state, row)
        for row in range(shape[1]):
            np.add(shifted[od_move[row]], 1.0, out=on_demand[:, row])
            np.add(shifted[spot_move[row]], ratio, out=spot[:, row])
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

    def weight(x: npt.NDArray[np.float64]) -> FloatArray:
        return x.astype(np.float32)[:, None, None]

    return (
        weight((1 - p_end) * (1 - p_adv)),
        weight((1 - p_end) * p_adv),
        weight(p_end),
        adv_to,
        flip_to,
    )
