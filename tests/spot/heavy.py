"""Synthetic spot traces whose runs and outages are heavy-tailed (Pareto lengths in seconds), as
real ones are: most spells are short, a few last many hours, and one that has lasted tends to
last. Rendered at any tick, so the same market can be seen at 600 s and at 200 s."""

from __future__ import annotations

import random

from gpulease.spot.traces import Trace


def heavy_trace(hours: float, *, gap_s: float, seed: int, shape: float = 1.3) -> Trace:
    """Alternating runs and outages with Pareto(``shape``) lengths of at least a tick."""
    rng = random.Random(seed)
    ticks = round(hours * 3600.0 / gap_s)
    data: list[int] = []
    up = rng.random() < 0.5
    while len(data) < ticks:
        scale = (1200.0 if up else 900.0) * (shape - 1.0) / shape  # mean 20 / 15 minutes
        length = max(gap_s, scale / (1.0 - rng.random()) ** (1.0 / shape))
        data.extend([int(up)] * max(1, round(length / gap_s)))
        up = not up
    return Trace(gap_s, tuple(data[:ticks]), name=f"heavy-{seed}")
