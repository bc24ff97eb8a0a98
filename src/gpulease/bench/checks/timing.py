"""Timing for the checks: a warmed-up median of repeats on the context's timer (host-side work),
and CUDA events for work queued on a GPU (:func:`cuda_median_s`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


def median_s(fn: Callable[[], object], timer: Callable[[], float], *, repeats: int,
             warmup: int = 1) -> float:  # fmt: skip
    """The median wall time of ``fn`` over ``repeats`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = timer()
        fn()
        times.append(timer() - start)
    return statistics.median(times)


def cuda_median_s(torch: Any, fn: Callable[[], object], *, repeats: int, inner: int = 1,
                  warmup: int = 3) -> float:  # fmt: skip
    """The median seconds of one ``fn`` on the current CUDA stream: ``inner`` calls between
    two CUDA events per repeat (so launch gaps do not count), ``repeats`` repeats, after
    ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) / 1000.0 / inner)
    return statistics.median(times)
