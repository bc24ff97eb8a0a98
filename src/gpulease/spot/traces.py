"""Spot availability traces in the spot-traces JSON format.

``{"metadata": {"gap_seconds": g}, "data": [n0, n1, ...]}``: ``data[i]`` is how many spot
instances could be had during tick ``i`` (``[i·g, (i+1)·g)`` seconds from the trace's start), so
spot is available for a job of ``k`` nodes in tick ``i`` when ``data[i] >= k``. Traces may carry
other metadata (prices, region); it is kept but not used here.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpulease.atomic import write_json_atomic
from gpulease.errors import UserInputError


@dataclass(frozen=True, slots=True)
class Trace:
    gap_seconds: float
    data: tuple[int, ...]
    name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def duration_seconds(self) -> float:
        return self.gap_seconds * len(self.data)

    def tick_at(self, seconds: float) -> int:
        """The tick that holds ``seconds`` after the trace's start; past the end, the trace
        repeats (a provider can run longer than the trace)."""
        if seconds < 0:
            raise ValueError("time before the trace's start")
        return int(seconds // self.gap_seconds) % len(self.data)

    def available(self, tick: int, nodes: int = 1) -> bool:
        return self.data[tick % len(self.data)] >= nodes

    def available_at(self, seconds: float, nodes: int = 1) -> bool:
        return self.available(self.tick_at(seconds), nodes)

    def next_change(self, seconds: float, nodes: int = 1) -> float | None:
        """Seconds from the start at which availability for ``nodes`` next flips, or None if it
        never does (all-available or all-unavailable trace)."""
        start = self.tick_at(seconds)
        now = self.available(start, nodes)
        for step in range(1, len(self.data) + 1):
            if self.available(start + step, nodes) != now:
                base = seconds - (seconds % self.gap_seconds)
                return base + step * self.gap_seconds
        return None

    def resampled(self, gap_seconds: float) -> Trace:
        """The same availability on ticks of ``gap_seconds`` (a whole divisor of this trace's
        tick): each tick becomes ``gap / gap_seconds`` ticks with its count."""
        factor = self.gap_seconds / gap_seconds
        if gap_seconds <= 0 or abs(factor - round(factor)) > 1e-9:
            raise ValueError(
                f"{gap_seconds} s does not divide the trace's {self.gap_seconds} s tick"
            )
        data = tuple(n for n in self.data for _ in range(round(factor)))
        return Trace(
            gap_seconds, data, self.name, {**self.metadata, "resampled_from": self.gap_seconds}
        )

    def availability(self, nodes: int = 1) -> float:
        """Share of ticks in which spot is available for ``nodes``."""
        return sum(1 for n in self.data if n >= nodes) / len(self.data)


def _fail(path: Path | str, field_name: str, message: str) -> UserInputError:
    return UserInputError(f"{path}: {field_name}: {message}")


def trace_from_json(doc: object, *, source: str = "trace") -> Trace:
    if not isinstance(doc, dict):
        raise _fail(source, "(top level)", "expected an object with 'metadata' and 'data'")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        raise _fail(source, "metadata", "missing or not an object")
    gap = meta.get("gap_seconds")
    if (
        isinstance(gap, bool)
        or not isinstance(gap, int | float)
        or not math.isfinite(gap)
        or gap <= 0
    ):
        raise _fail(source, "metadata.gap_seconds", f"must be a positive number, got {gap!r}")
    data = doc.get("data")
    if not isinstance(data, list) or not data:
        raise _fail(source, "data", "must be a non-empty list of instance counts")
    counts = []
    for i, value in enumerate(data):
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value < 0
            or not math.isfinite(value)
        ):
            raise _fail(source, f"data[{i}]", f"must be a count ≥ 0, got {value!r}")
        counts.append(int(value))
    return Trace(float(gap), tuple(counts), name=Path(source).stem, metadata=dict(meta))


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file; bad files raise :class:`UserInputError` naming the file and field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(path, "file", exc.strerror or "cannot be read") from None
    except json.JSONDecodeError as exc:
        raise _fail(path, f"line {exc.lineno}", f"not valid JSON ({exc.msg})") from None
    return trace_from_json(doc, source=str(path))


def write_trace(path: str | os.PathLike[str], trace: Trace) -> None:
    """Write ``trace`` atomically (:mod:`gpulease.atomic`)."""
    path = Path(path)
    doc = {
        "metadata": {**trace.metadata, "gap_seconds": trace.gap_seconds},
        "data": list(trace.data),
    }
    write_json_atomic(path, doc)


def generate_trace(
    ticks: int,
    *,
    gap_seconds: float = 600.0,
    availability: float = 0.7,
    mean_outage_ticks: float = 6.0,
    capacity: int = 1,
    seed: int = 0,
) -> Trace:
    """A synthetic on/off trace (two-state Markov chain) with the given long-run availability and
    mean outage length — for tests, demos and the sim provider when no trace file is given."""
    if not 0.0 < availability < 1.0:
        raise ValueError("availability must be strictly between 0 and 1")
    rng = random.Random(seed)
    p_recover = 1.0 / max(mean_outage_ticks, 1.0)
    p_fail = p_recover * (1 - availability) / availability
    up = True
    data = []
    for _ in range(ticks):
        data.append(capacity if up else 0)
        up = rng.random() >= p_fail if up else rng.random() < p_recover
    return Trace(
        gap_seconds,
        tuple(data),
        name=f"synthetic-{seed}",
        metadata={"generator": "markov", "seed": seed, "availability": availability},
    )
