"""Timing for the checks: a warmed-up median of repeats on the context's timer (host-side work),
and CUDA events for work queued on the GPUs (:func:`cuda_medians_s`: every GPU at once, one
figure each; the checks report the slowest, :func:`slowest_gpu`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
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
    """The median seconds of one ``fn`` on the current CUDA device (see :func:`cuda_medians_s`)."""
    device = torch.cuda.current_device()
    return cuda_medians_s(torch, {device: fn}, repeats=repeats, inner=inner, warmup=warmup)[0]


def cuda_medians_s(torch: Any, fns: Mapping[int, Callable[[], object]], *, repeats: int,
                   inner: int = 1, warmup: int = 3) -> list[float]:  # fmt: skip
    """The median seconds of one call of each ``fns[device]`` on its CUDA device, every device
    working at once (as in training: shared power, cooling and host): per repeat, ``inner``
    calls between two CUDA events on each device's current stream (so launch gaps do not
    count); ``warmup`` untimed calls first. One figure per device, in ``fns``' order."""
    for device, fn in fns.items():
        with torch.cuda.device(device):
            for _ in range(warmup):
                fn()
    for device in fns:
        torch.cuda.synchronize(device)
    times: dict[int, list[float]] = {device: [] for device in fns}
    for _ in range(repeats):
        events = {}
        for device, fn in fns.items():
            with torch.cuda.device(device):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                end.record()
            events[device] = (start, end)
        for device, (start, end) in events.items():
            end.synchronize()
            times[device].append(float(start.elapsed_time(end)) / 1000.0 / inner)
    return [statistics.median(t) for t in times.values()]


def slowest_gpu(per_gpu: list[float]) -> tuple[int, str]:
    """The index of the lowest figure and how to say where it was measured."""
    slowest = min(range(len(per_gpu)), key=per_gpu.__getitem__)
    if len(per_gpu) == 1:
        return slowest, "cuda:0"
    return slowest, f"cuda:{slowest}, the slowest of {len(per_gpu)} GPUs at once"
