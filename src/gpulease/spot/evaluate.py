"""Evaluation of spot policies over many windows of many traces: the engine of ``gpulease spot-sim``
and ``benchmarks/spot/run.py``.

Owns input validation (every problem is a :class:`~gpulease.errors.UserInputError` naming the
argument), window selection and the per-cell statistics. Windows: with ``start_ticks``, exactly
those start ticks for every trace; otherwise, for each trace in the order given, ``starts`` ticks
drawn with ``random.Random(seed).randrange(0, len(data) − floor(max_deadline / gap))`` from ONE
generator per run, shared across traces in order. Every (deadline, changeover, policy) sees the
same windows. One :class:`Cell` per (trace, deadline, changeover, policy).

**History.** A policy that has a ``set_history(available, gap_s)`` method (:class:`~gpulease.spot.
sim.HistoryAware`, e.g. ``gpulease``) is given, before each window, the availability of the same
trace in the ``history_hours`` (default :data:`HISTORY_HOURS`) before the window's start — the
past of that market, which a live system has observed too; never anything at or after the start.
Windows near a trace's start get less (none at tick 0). ``history_hours=0`` turns it off.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpulease.errors import UserInputError
from gpulease.spot.optimal import optimal_cost
from gpulease.spot.policies import OPTIMAL, POLICY_NAMES, make_policy
from gpulease.spot.sim import HistoryAware, Policy
from gpulease.spot.simulate import WindowResult, baseline_cost, floor_ticks, simulate_window
from gpulease.spot.traces import Trace

#: Hours of a trace before each window that a history-aware policy is shown.
HISTORY_HOURS = 168.0

#: The optimum of one window: ``fn(window, job_s=…, deadline_s=…, changeover_s=…, gap_s=…,
#: od_price=…, spot_price=…)`` (:func:`~gpulease.spot.optimal.optimal_cost`, or a cache of it).
OptimalFn = Callable[..., WindowResult]


@dataclass(frozen=True, slots=True)
class Cell:
    """Statistics of one policy over every window of one trace at one deadline and changeover.

    Cost ratios are per window (cost ÷ all-on-demand cost); a missed window counts at its cost so
    far. ``spot_hours`` / ``on_demand_hours`` are billed hours, mean per window.
    """

    trace: str
    policy: str
    deadline_hours: float
    changeover_hours: float
    nodes: int
    windows: int
    mean_cost_ratio: float
    p25: float
    p75: float
    p90: float
    misses: int
    spot_hours: float
    on_demand_hours: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = "≥ 0" if allow_zero else "> 0"
        raise UserInputError(f"{name}: must be a number {bound}, got {value!r}")


def _validate_times(
    job_hours: float, deadline_hours: Sequence[float], changeover_hours: Sequence[float]
) -> None:
    _positive("--job-hours", job_hours)
    if not deadline_hours:
        raise UserInputError("--deadline-hours: give at least one deadline")
    for deadline in deadline_hours:
        _positive("--deadline-hours", deadline)
        if deadline < job_hours:
            raise UserInputError(
                f"--deadline-hours: {deadline:g} h is shorter than the job ({job_hours:g} h)"
            )
    if not changeover_hours:
        raise UserInputError("--changeover-hours: give at least one changeover")
    for changeover in changeover_hours:
        _positive("--changeover-hours", changeover, allow_zero=True)


def _validate_policies(policies: Sequence[str]) -> None:
    if not policies:
        raise UserInputError("--policy: give at least one policy")
    for name in policies:
        if name not in POLICY_NAMES:
            raise UserInputError(
                f"--policy: unknown policy {name!r}; choose from {', '.join(POLICY_NAMES)}"
            )
    if len(set(policies)) != len(policies):
        raise UserInputError("--policy: a policy is named twice")


def _validate_windows(starts: int | None, start_ticks: Sequence[int] | None) -> None:
    if starts is not None and start_ticks is not None:
        raise UserInputError("--starts: give either --starts (with --seed) or --start-ticks")
    if starts is not None and starts < 1:
        raise UserInputError(f"--starts: must be ≥ 1, got {starts}")
    if start_ticks is not None:
        if not start_ticks:
            raise UserInputError("--start-ticks: give at least one start tick")
        if any(tick < 0 for tick in start_ticks):
            raise UserInputError("--start-ticks: start ticks must be ≥ 0")


def validate(
    *,
    job_hours: float,
    deadline_hours: Sequence[float],
    changeover_hours: Sequence[float],
    policies: Sequence[str],
    starts: int | None,
    start_ticks: Sequence[int] | None,
    nodes: int,
    od_price: float,
    spot_price: float,
    history_hours: float = 0.0,
) -> None:
    """Check every argument that does not depend on a trace."""
    _validate_times(job_hours, deadline_hours, changeover_hours)
    _validate_policies(policies)
    _validate_windows(starts, start_ticks)
    if nodes < 1:
        raise UserInputError(f"--nodes: must be ≥ 1, got {nodes}")
    _positive("--od-price", od_price)
    _positive("--spot-price", spot_price, allow_zero=True)
    _positive("--history-hours", history_hours, allow_zero=True)


def window_starts(
    traces: Sequence[Trace],
    *,
    max_deadline_hours: float,
    starts: int | None,
    seed: int,
    start_ticks: Sequence[int] | None,
) -> list[list[int]]:
    """The start ticks of every trace's windows (see the module docstring)."""
    rng = random.Random(seed)
    result = []
    for trace in traces:
        need = floor_ticks(max_deadline_hours * 3600.0, trace.gap_seconds)
        label = trace.name or "trace"
        if start_ticks is not None:
            for tick in start_ticks:
                if tick + need > len(trace):
                    raise UserInputError(
                        f"--start-ticks: tick {tick} of {label} leaves {len(trace) - tick} ticks, "
                        f"the longest deadline ({max_deadline_hours:g} h) needs {need}"
                    )
            result.append(list(start_ticks))
            continue
        room = len(trace) - need
        if room <= 0:
            raise UserInputError(
                f"TRACE: {label} has {len(trace)} ticks, too short for the longest deadline "
                f"({max_deadline_hours:g} h = {need} ticks of {trace.gap_seconds:g} s)"
            )
        result.append([rng.randrange(0, room) for _ in range(starts or 0)])
    return result


@dataclass(frozen=True, slots=True)
class _Windows:
    """The windows of one (trace, deadline): availability from each start, and the history
    before each start (empty arrays when history is off)."""

    windows: list[npt.NDArray[np.bool_]]
    histories: list[list[bool]]


def _run_policy(
    name: str, windows: _Windows, params: dict[str, float], optimal: OptimalFn
) -> list[WindowResult]:
    if name == OPTIMAL:
        try:
            return [optimal(window, **params) for window in windows.windows]
        except ValueError as exc:
            raise UserInputError(f"--changeover-hours/--job-hours (optimal): {exc}") from None
    policy: Policy = make_policy(name)
    baseline = baseline_cost(
        job_s=params["job_s"],
        changeover_s=params["changeover_s"],
        gap_s=params["gap_s"],
        od_price=params["od_price"],
    )
    results = []
    for window, history in zip(windows.windows, windows.histories, strict=True):
        if isinstance(policy, HistoryAware):
            policy.set_history(history, params["gap_s"])
        avail = [bool(a) for a in window.tolist()]
        results.append(simulate_window(policy, avail, baseline=baseline, **params))
    return results


def _cell(
    results: list[WindowResult],
    *,
    trace: str,
    policy: str,
    deadline: float,
    changeover: float,
    nodes: int,
) -> Cell:
    ratios = np.array([r.cost_ratio for r in results], dtype=float)
    p25, p75, p90 = (float(v) for v in np.percentile(ratios, [25, 75, 90]))
    return Cell(
        trace=trace,
        policy=policy,
        deadline_hours=deadline,
        changeover_hours=changeover,
        nodes=nodes,
        windows=len(results),
        mean_cost_ratio=float(ratios.mean()),
        p25=p25,
        p75=p75,
        p90=p90,
        misses=sum(r.miss for r in results),
        spot_hours=float(np.mean([r.spot_s for r in results])) / 3600.0,
        on_demand_hours=float(np.mean([r.on_demand_s for r in results])) / 3600.0,
    )


def run_spot_sim(
    traces: list[Trace],
    *,
    job_hours: float,
    deadline_hours: list[float],
    changeover_hours: list[float],
    policies: list[str],
    starts: int | None = None,
    seed: int = 0,
    start_ticks: list[int] | None = None,
    nodes: int = 1,
    od_price: float = 3.06,
    spot_price: float = 0.9731,
    history_hours: float = HISTORY_HOURS,
    optimal: OptimalFn = optimal_cost,
) -> list[Cell]:
    """Evaluate ``policies`` on every window of every trace, for every deadline and changeover.

    Without ``start_ticks``, ``starts`` defaults to 300 windows per trace. ``optimal`` computes
    the optimum of a window (a benchmark may pass a cache of :func:`optimal_cost`).
    """
    validate(
        job_hours=job_hours,
        deadline_hours=deadline_hours,
        changeover_hours=changeover_hours,
        policies=policies,
        starts=starts,
        start_ticks=start_ticks,
        nodes=nodes,
        od_price=od_price,
        spot_price=spot_price,
        history_hours=history_hours,
    )
    if not traces:
        raise UserInputError("TRACE: give at least one trace file")
    for name in policies:
        if name != OPTIMAL:
            make_policy(name)  # fail early, before any simulation, if it cannot be built
    starts_per_trace = window_starts(
        traces,
        max_deadline_hours=max(deadline_hours),
        starts=starts or 300,
        seed=seed,
        start_ticks=start_ticks,
    )
    cells = []
    for trace, trace_starts in zip(traces, starts_per_trace, strict=True):
        available = np.asarray(trace.data) >= nodes
        back = floor_ticks(history_hours * 3600.0, trace.gap_seconds)
        histories = [available[max(0, s - back) : s].tolist() for s in trace_starts]
        for deadline in deadline_hours:
            horizon = floor_ticks(deadline * 3600.0, trace.gap_seconds)
            windows = _Windows([available[s : s + horizon] for s in trace_starts], histories)
            for changeover in changeover_hours:
                params = {
                    "job_s": job_hours * 3600.0,
                    "deadline_s": deadline * 3600.0,
                    "changeover_s": changeover * 3600.0,
                    "gap_s": trace.gap_seconds,
                    "od_price": od_price,
                    "spot_price": spot_price,
                }
                for name in policies:
                    results = _run_policy(name, windows, params, optimal)
                    cells.append(
                        _cell(
                            results,
                            trace=trace.name,
                            policy=name,
                            deadline=deadline,
                            changeover=changeover,
                            nodes=nodes,
                        )
                    )
    return cells
