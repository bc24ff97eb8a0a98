"""The spot/on-demand decision problem shared by the simulator, ``gpulease spot-sim`` and (later)
the managed-job controller: the modes, what a policy may observe at the start of a tick, and the
policy protocol. Semantics follow issue 5 (the "Can't Be Late" NSDI '24 rules); all times are in
seconds.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


class Mode(enum.IntEnum):
    """What the job runs on during one tick."""

    IDLE = 0
    SPOT = 1
    ON_DEMAND = 2


@dataclass(frozen=True)
class Observation:
    """Everything a policy may see at the start of tick ``tick`` (never the future of the trace).

    ``prev_mode`` is the mode of the previous tick, already turned to IDLE when spot was chosen
    but is unavailable now (a preemption). ``pending`` is the changeover (restart) time still to
    pay before progress resumes.
    """

    tick: int
    prev_mode: Mode
    spot_available: bool
    progress: float  # seconds of work done, 0 ≤ progress ≤ job
    elapsed: float  # tick × gap
    pending: float  # changeover seconds still pending
    job: float  # C: seconds of work the job needs
    deadline: float  # D: seconds from the window's start
    changeover: float  # d: seconds lost each time the job (re)starts on a mode
    gap: float  # seconds per tick


class Policy(Protocol):
    """An online policy: one decision per tick from the observation alone."""

    name: str

    def reset(self) -> None:
        """Forget any state: a new window starts."""

    def decide(self, obs: Observation) -> Mode:
        """The mode for this tick (SPOT when spot is unavailable counts as IDLE)."""
        ...


@runtime_checkable
class HistoryAware(Protocol):
    """A policy that can be shown the market's availability before its window starts."""

    def set_history(self, available: Sequence[bool], gap_s: float) -> None:
        """``available[i]``: spot availability in the ``len − i``-th tick before the window's
        start (the last entry is the tick just before it); kept across ``reset()``."""
