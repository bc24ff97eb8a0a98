"""The rate schedule of a load run (pure: no I/O, no clock).

A :class:`Schedule` is :class:`Segment` s one after another, each a rate going linearly from
``start_rps`` to ``end_rps`` over ``duration_s`` (a constant rate is one flat segment). Request k
(0, 1, …) is due when the rate's integral reaches k — open-loop arrivals, computed exactly from
the quadratic of each segment. ``parse_ramp("10:200:60s,200:10:60s")`` and
``parse_duration_s("250ms")`` read the command line's forms; bad values are UserInputError naming
the argument.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpulease.errors import UserInputError

MAX_DURATION_S = 3600.0
MAX_RATE = 100_000.0
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(text: str, what: str = "duration") -> float:
    """``60s``, ``1.5m``, ``250ms``, ``2h``; a plain number is seconds."""
    match = _DURATION.match(text)
    if not match:
        raise UserInputError(f"{what}: expected a duration such as 30s, 2m or 250ms, got {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Segment:
    """The rate goes linearly from ``start_rps`` to ``end_rps`` over ``duration_s``."""

    start_rps: float
    end_rps: float
    duration_s: float

    def count(self, t: float) -> float:
        """Requests due in this segment by ``t`` seconds into it (the rate's integral)."""
        slope = (self.end_rps - self.start_rps) / self.duration_s
        return self.start_rps * t + slope * t * t / 2

    def time_of(self, m: float) -> float | None:
        """When the count reaches ``m`` (≥ 0), or None if not before the segment's end."""
        if m <= 0:
            return 0.0 if self.start_rps > 0 or self.end_rps > 0 else None
        a = (self.end_rps - self.start_rps) / (2 * self.duration_s)
        b = self.start_rps
        disc = b * b + 4 * a * m
        if disc < 0 or b + math.sqrt(disc) <= 0:
            return None
        t = 2 * m / (b + math.sqrt(disc))  # the stable root of a t² + b t − m = 0
        return t if t < self.duration_s else None


@dataclass(frozen=True)
class Schedule:
    """Segments one after another; request k (0, 1, …) is due when the count reaches k."""

    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise UserInputError("schedule: at least one segment")
        for seg in self.segments:
            for rate in (seg.start_rps, seg.end_rps):
                if not (math.isfinite(rate) and 0 <= rate <= MAX_RATE):
                    raise UserInputError(f"rate: {rate} req/s, expected 0..{MAX_RATE:g}")
            if not (math.isfinite(seg.duration_s) and seg.duration_s > 0):
                raise UserInputError(f"duration: {seg.duration_s} s, expected > 0")
        if self.duration_s > MAX_DURATION_S:
            raise UserInputError(f"duration: {self.duration_s:g} s, at most {MAX_DURATION_S:g}")

    @classmethod
    def constant(cls, rps: float, duration_s: float) -> Schedule:
        return cls((Segment(rps, rps, duration_s),))

    @property
    def duration_s(self) -> float:
        return sum(seg.duration_s for seg in self.segments)

    @property
    def expected_requests(self) -> float:
        return sum(seg.count(seg.duration_s) for seg in self.segments)

    def rate_at(self, t: float) -> float:
        for seg in self.segments:
            if t <= seg.duration_s:
                return seg.start_rps + (seg.end_rps - seg.start_rps) * t / seg.duration_s
            t -= seg.duration_s
        return 0.0

    def arrivals(self, limit: int | None = None) -> Iterator[float]:
        """Due times in seconds from the start, in order; at most ``limit`` of them."""
        k, offset, base = 0, 0.0, 0.0
        for seg in self.segments:
            while limit is None or k < limit:
                t = seg.time_of(k - base)
                if t is None:
                    break
                yield offset + t
                k += 1
            base += seg.count(seg.duration_s)
            offset += seg.duration_s


def parse_ramp(text: str) -> Schedule:
    """``10:200:60s`` (10 → 200 req/s over 60 s), several joined by commas."""
    segments = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) != 3:
            raise UserInputError(f"--ramp: {part!r} is not START:END:DURATION (as in 10:200:60s)")
        try:
            start, end = float(fields[0]), float(fields[1])
        except ValueError:
            raise UserInputError(f"--ramp: {part!r}: the rates must be numbers (req/s)") from None
        segments.append(Segment(start, end, parse_duration_s(fields[2], "--ramp")))
    return Schedule(tuple(segments))
