"""The ``gpulease`` deadline-aware spot policy.

Online: each decision uses the current :class:`~gpulease.spot.sim.Observation`, what the policy has
seen earlier in the window, and the market's past that it was handed (``set_history``, or
``history=`` saved statistics); never the future. ``reset()`` (called by the simulator for every
window, and implied by a tick-0 observation or a tick that goes backwards) forgets the window but
keeps the handed-over history. Rules at the start of each tick (issue 5 semantics, seconds):

**A. Expected cost under a heavy-tailed model.** Spot runs and outages are modelled by how long
they last, with a hazard that falls with age (:mod:`gpulease.spot.runs`: a run that has lasted an
hour is far less likely to end in the next ten minutes than one that just began), learned from the
history and the window so far. Every ``REFIT_S`` of window time the policy looks up the decision
table for the current estimate (:func:`~gpulease.spot.spot_model.table_for`: an exact backward
dynamic program over (time left, availability, age of the current spell, previous mode with its
pending changeover, progress) on a planning grid of about 288 steps per job, the same grid on any
tick size) and takes the decision that minimises the expected cost to finish. The remaining slack
is what the table spends: idling through an outage, or leaving a paid-up on-demand for a young spot
run, is worth it exactly when the expected saving beats the expected cost in slack and changeovers.

**B. Floor** (:func:`floor`, ``FLOOR_STRETCH``), over A's proposal: the model is only as good as
the market is like its past, and when a window turns poorer than the history (a long outage the
history never showed) expected-cost decisions spend the slack waiting. So, as uniform progress
does: a job on on-demand does not drop it in an outage (that would waste the changeover it paid),
and while progress is below the lagging uniform schedule ``C·t / (FLOOR_STRETCH·D)`` (for a job on
on-demand: that schedule ``FLOOR_LEAD_CHANGEOVERS`` changeovers ahead) the job neither idles nor
leaves on-demand for spot; it may still start spot from idle. ``FLOOR_STRETCH = 0`` turns B off;
the constants were chosen on the tuning traces (benchmarks/README.md).

**C. Exact safety net** (:func:`is_safe`), on top of A and B: a proposal other than on-demand is
taken only if, even when spot vanishes for the rest of the window, on-demand alone can still finish
in time; otherwise run on-demand.

Why it never misses (invariant). Call a state *safe* when on-demand from now on finishes by the
deadline: with ``N`` ticks left (this one included) and ``rem`` work left, ``ceil((rem + p)/gap)
≤ N`` where ``p`` is the pending changeover if the job is already on on-demand and ``d`` otherwise
(a switch onto on-demand sets pending to ``d``; a preempted or idle job restarts with ``d``).
(a) Choosing on-demand in a safe state keeps it safe: the plan "on-demand until done" simply goes
on. (b) :func:`is_safe` allows idle or spot only if the state after this tick is safe in the worst
case, i.e. spot unavailable at the next tick: ``ceil((rem' + d)/gap) ≤ N − 1`` where ``rem'`` is
``rem`` (idle) or ``rem`` less this tick's spot progress ``min(max(0, gap − pending), rem)``; if
spot stays available, switching to on-demand from spot also costs exactly ``d``, so the same bound
holds. Whatever A or B proposes passes through (b), so if the first tick is safe
(``ceil((C + d)/gap) ≤ floor(D/gap)``) every tick is, and the job finishes in time. When the first
tick is not safe no policy can guarantee the deadline; we then run on-demand throughout, the
fastest worst-case plan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpulease.spot.runs import RunStats
from gpulease.spot.sim import Mode, Observation
from gpulease.spot.spot_model import DEFAULT_SPOT_RATIO, IDLE, OD, Table, table_for

_EPS = 1e-9

#: Floor: while progress is below ``C·t / (FLOOR_STRETCH·D)`` (a lagging uniform schedule), the job
#: neither idles in an outage nor leaves on-demand for spot, whatever the model expects; it may
#: still start spot from idle (``0`` turns the floor off).
FLOOR_STRETCH = 1.2
#: The floor applies to deadlines of at least this many seconds (below, the model alone decides).
FLOOR_MIN_DEADLINE_S = 24 * 3600.0
#: How far ahead of the floor (in changeovers) a job on on-demand must be before it may leave it.
FLOOR_LEAD_CHANGEOVERS = 2.0

#: The model is refitted (and its table looked up again) at most this often, in window seconds.
REFIT_S = 4 * 3600.0

_FROM_CODE = {OD: Mode.ON_DEMAND, IDLE: Mode.IDLE}


def _ticks(seconds: float, gap: float) -> int:
    """Whole ticks needed to cover ``seconds`` (robust to float noise)."""
    return max(0, math.ceil(seconds / gap - _EPS))


def ticks_left(obs: Observation) -> int:
    """Ticks from this one (included) to the deadline."""
    return math.floor(obs.deadline / obs.gap + _EPS) - obs.tick


def is_safe(obs: Observation, mode: Mode) -> bool:
    """Whether choosing ``mode`` now still lets on-demand alone finish whatever spot does next."""
    if mode == Mode.ON_DEMAND:
        return True
    rem = obs.job - obs.progress
    if mode == Mode.SPOT and obs.spot_available:
        pend = obs.pending if obs.prev_mode == Mode.SPOT else obs.changeover
        rem -= min(max(0.0, obs.gap - pend), rem)
        if rem <= _EPS:
            return True
    return _ticks(rem + obs.changeover, obs.gap) <= ticks_left(obs) - 1


def behind_floor(obs: Observation) -> bool:
    """Whether progress is below the lagging uniform schedule (:data:`FLOOR_STRETCH`); a job on
    on-demand counts as behind until it is :data:`FLOOR_LEAD_CHANGEOVERS` changeovers ahead
    (hysteresis: else it would idle at the line and pay a changeover to come back)."""
    if FLOOR_STRETCH <= 0 or obs.deadline < FLOOR_MIN_DEADLINE_S:
        return False
    lead = FLOOR_LEAD_CHANGEOVERS * obs.changeover if obs.prev_mode == Mode.ON_DEMAND else 0.0
    line = (obs.elapsed + lead) * obs.job / (FLOOR_STRETCH * obs.deadline)
    return obs.progress < min(obs.job, line)


def floor(obs: Observation, mode: Mode) -> Mode:
    """Rule B over the model's ``mode``: a paid-up on-demand is not dropped in an outage; behind
    the floor the job neither idles nor leaves on-demand for spot (it may start spot from idle)."""
    if FLOOR_STRETCH <= 0 or obs.deadline < FLOOR_MIN_DEADLINE_S or mode == Mode.ON_DEMAND:
        return mode
    if obs.prev_mode == Mode.ON_DEMAND and (mode == Mode.IDLE or behind_floor(obs)):
        return Mode.ON_DEMAND
    if mode == Mode.IDLE and behind_floor(obs):
        return Mode.ON_DEMAND
    return mode


class GpuleasePolicy:
    """Expected-cost decisions under a heavy-tailed run/outage model learned from what the market
    showed (history and window), with an exact safety net."""

    name = "gpulease"

    def __init__(self, spot_ratio: float = DEFAULT_SPOT_RATIO, history: RunStats | None = None):
        self.spot_ratio = spot_ratio
        self._base = history.copy() if history is not None else None
        self.reset()

    def set_history(self, available: Sequence[bool], gap_s: float) -> None:
        """Start every window from the statistics of ``available`` (ticks of ``gap_s`` seconds
        just before the window; :class:`~gpulease.spot.sim.HistoryAware`)."""
        self._base = RunStats.from_availability(available, gap_s) if available else None
        self.reset()

    @property
    def history(self) -> RunStats:
        """The statistics now: the seeded history plus everything seen in this window."""
        return self._stats

    def reset(self) -> None:
        """Forget the window (back to the seeded history, if any)."""
        self._stats = self._base.copy() if self._base is not None else RunStats()
        self._fresh = self._base is None
        self._last_tick = -1
        self._last_up: bool | None = None
        self._table: Table | None = None
        self._fitted_at = -math.inf

    def _observe(self, obs: Observation) -> None:
        if obs.tick == 0 or obs.tick <= self._last_tick:
            self.reset()
        if self._fresh:
            self._stats.gap_s = obs.gap
            self._fresh = False
        if self._last_up is not None:
            self._stats.advance(self._last_up, (obs.tick - self._last_tick) * obs.gap)
        self._last_up = obs.spot_available
        self._last_tick = obs.tick

    def _plan(self, obs: Observation) -> Table:
        if self._table is None or obs.elapsed - self._fitted_at >= REFIT_S - _EPS:
            self._table = table_for(
                job=obs.job,
                time_left=ticks_left(obs) * obs.gap,
                changeover=obs.changeover,
                gap=obs.gap,
                rates=self._stats.rates(),
                spot_ratio=self.spot_ratio,
            )
            self._fitted_at = obs.elapsed
        return self._table

    def decide(self, obs: Observation) -> Mode:
        self._observe(obs)
        code = self._plan(obs).decide(
            time_left=ticks_left(obs) * obs.gap,
            spot=obs.spot_available,
            age_s=self._stats.age_now(obs.spot_available),
            prev_mode=int(obs.prev_mode),
            pending=obs.pending,
            progress=obs.progress,
        )
        mode = _FROM_CODE.get(code, Mode.SPOT)
        if mode == Mode.SPOT and not obs.spot_available:
            mode = Mode.IDLE
        mode = floor(obs, mode)
        return mode if is_safe(obs, mode) else Mode.ON_DEMAND
