"""The availability model of the ``gpulease`` spot policy: how long spot runs and outages last.

Spot availability alternates between *runs* (available) and *outages* (not). Real traces are
heavy-tailed: a run or outage that has lasted longer tends to last longer (on the AWS traces the
rate at which a run ends falls from ~2 per hour in its first 10 minutes to ~0.1 per hour after
12 hours). So the model is an alternating renewal process with a **piecewise-constant hazard by
age**: for availability ``a`` (0 outage, 1 run) and age bucket ``b`` (``AGE_EDGES_S``, seconds),
``rate[a, b]`` is the chance per second that a spell of age in that bucket ends. Everything is in
seconds, so the model does not depend on the trace's tick.

:class:`RunStats` owns the statistics and moves them as availability is observed: for each
``(a, b)`` the number of spells that ended in the bucket (``events``) and the seconds spent in it
(``exposure``), both decayed with a half-life of ``HALF_LIFE_S`` (markets drift), plus the current
spell (its availability and age). The estimate blends them with a prior worth ``PRIOR_WEIGHT_S``
seconds of exposure per bucket at the rates ``PRIOR_RATE_PER_H`` (chosen on the tuning traces,
benchmarks/README.md). A tick of ``g`` seconds is a discrete observation: the per-tick end fraction
``f = (events + p·W/g)·g / (exposure + W)`` (``p = 1 − e^(−λ·g)``, the prior's ends per tick) is
turned into the continuous rate ``−ln(1 − f) / g``, so a model with no data is exactly its prior
and a trace resampled to shorter ticks yields about the same rates.

The statistics carry over from one window (or job) to the next: :meth:`RunStats.copy`,
:meth:`RunStats.to_dict` / :meth:`RunStats.from_dict` (persist them), :meth:`RunStats.advance`
(feed what was seen), :meth:`RunStats.from_availability` (replay a tick sequence).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Age bucket edges (seconds): [0, 10 min), [10, 20 min), …, [12 h, ∞).
AGE_EDGES_S: tuple[float, ...] = (0.0, 600.0, 1200.0, 2400.0, 5400.0, 10800.0, 21600.0, 43200.0)
BUCKETS = len(AGE_EDGES_S)
#: Prior hazard rates (ends per hour) by bucket, for outages (index 0) and runs (index 1).
PRIOR_RATE_PER_H: tuple[tuple[float, ...], tuple[float, ...]] = (
    (2.0, 1.4, 1.0, 0.8, 0.4, 0.25, 0.15, 0.08),
    (1.8, 1.4, 1.0, 0.6, 0.4, 0.25, 0.15, 0.08),
)
#: Weight of the prior: seconds of exposure per bucket.
PRIOR_WEIGHT_S = 2.0 * 3600.0
#: Statistics lose half their weight every this many seconds of observed time.
HALF_LIFE_S = 4.0 * 86400.0
#: Largest per-tick end fraction turned into a rate (keeps ``−ln(1 − f)`` finite).
_MAX_FRACTION = 0.95


def bucket_of(age_s: float) -> int:
    """The bucket holding ``age_s`` seconds (bucket ``b`` is ``[edge[b], edge[b+1])``)."""
    b = 0
    while b + 1 < BUCKETS and age_s >= AGE_EDGES_S[b + 1] - 1e-9:
        b += 1
    return b


def _overlaps(start: float, stop: float) -> list[float]:
    """Seconds of ``[start, stop)`` that fall in each age bucket."""
    out = []
    for b in range(BUCKETS):
        lo = AGE_EDGES_S[b]
        hi = AGE_EDGES_S[b + 1] if b + 1 < BUCKETS else math.inf
        out.append(max(0.0, min(hi, stop) - max(lo, start)))
    return out


@dataclass
class RunStats:
    """Decayed spell statistics of one market (module docstring)."""

    gap_s: float = 600.0  # the tick of the observations (for the discrete → continuous rate)
    events: list[list[float]] = field(default_factory=lambda: [[0.0] * BUCKETS, [0.0] * BUCKETS])
    exposure: list[list[float]] = field(default_factory=lambda: [[0.0] * BUCKETS, [0.0] * BUCKETS])
    state: bool | None = None  # availability of the current spell (None: nothing seen yet)
    age_s: float = 0.0  # how long the current spell has lasted
    seen_s: float = 0.0  # seconds observed in all (not decayed)

    def copy(self) -> RunStats:
        return RunStats(
            self.gap_s,
            [list(row) for row in self.events],
            [list(row) for row in self.exposure],
            self.state,
            self.age_s,
            self.seen_s,
        )

    def advance(self, up: bool, seconds: float) -> None:
        """The market was ``up`` (spot available) for the next ``seconds``."""
        if seconds <= 0:
            return
        decay = 0.5 ** (seconds / HALF_LIFE_S)
        for a in (0, 1):
            for b in range(BUCKETS):
                self.events[a][b] *= decay
                self.exposure[a][b] *= decay
        if self.state is not None and up != self.state:
            # the spell ended during its last tick: an end at the age that tick began
            self.events[int(self.state)][bucket_of(max(0.0, self.age_s - self.gap_s))] += 1.0
            self.age_s = 0.0
        if self.state is None:
            self.age_s = 0.0
        self.state = up
        row = self.exposure[int(up)]
        for b, part in enumerate(_overlaps(self.age_s, self.age_s + seconds)):
            row[b] += part
        self.age_s += seconds
        self.seen_s += seconds

    @classmethod
    def from_availability(cls, available: Sequence[bool], gap_s: float) -> RunStats:
        """Statistics after replaying ``available`` (one entry per tick of ``gap_s`` seconds)."""
        stats = cls(gap_s=gap_s)
        stats.extend(available)
        return stats

    def extend(self, available: Sequence[bool]) -> None:
        """Feed a tick sequence (``gap_s`` seconds per entry), spell by spell."""
        n = len(available)
        i = 0
        while i < n:
            j = i + 1
            up = bool(available[i])
            while j < n and bool(available[j]) == up:
                j += 1
            self.advance(up, (j - i) * self.gap_s)
            i = j

    def rates(self) -> list[list[float]]:
        """``rate[a][b]``: ends per second of a spell of availability ``a`` in age bucket ``b``."""
        out = []
        for a in (0, 1):
            row = []
            for b in range(BUCKETS):
                # the prior as the ends per tick its continuous rate would show
                prior = -math.expm1(-PRIOR_RATE_PER_H[a][b] / 3600.0 * self.gap_s) / self.gap_s
                events = self.events[a][b] + prior * PRIOR_WEIGHT_S
                exposure = self.exposure[a][b] + PRIOR_WEIGHT_S
                fraction = min(_MAX_FRACTION, events * self.gap_s / exposure)
                row.append(-math.log1p(-fraction) / self.gap_s)
            out.append(row)
        return out

    def age_now(self, up: bool) -> float:
        """Age of the spell in progress if availability is ``up`` now (0 if it just changed)."""
        return self.age_s if self.state is not None and up == self.state else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "gap_s": self.gap_s,
            "events": self.events,
            "exposure": self.exposure,
            "state": self.state,
            "age_s": self.age_s,
            "seen_s": self.seen_s,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunStats:
        return cls(
            float(doc["gap_s"]),
            [[float(x) for x in row] for row in doc["events"]],
            [[float(x) for x in row] for row in doc["exposure"]],
            None if doc["state"] is None else bool(doc["state"]),
            float(doc["age_s"]),
            float(doc["seen_s"]),
        )
