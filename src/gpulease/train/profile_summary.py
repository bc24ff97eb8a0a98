"""The summary of a profiled window: the top operators by self time and the split of step time
into compute, communication, data wait and other. Pure (no torch): it works on :class:`Span`
records that :mod:`gpulease.train.profile` makes from ``torch.profiler`` events.

How the split is derived, step by step (the windows are the profiler's ``ProfilerStep#N`` spans:
from one ``prof.step()`` call to the next):

- **the timeline** is the CUDA devices' when CUDA was profiled (kernels, memcpys and memsets:
  what keeps a GPU busy), else the CPU's (the operators, on every thread);
- **compute**: time in the window when a non-communication item of that timeline runs
  (on the CPU timeline an operator counts as communication or data wait when it, or an operator
  it runs inside, is one: an ``aten::stack`` inside the DataLoader's ``__next__`` is data wait);
- **communication**: time when a communication item runs (names matching :data:`COMM_PATTERN`:
  NCCL kernels, gloo and c10d operators, ``all_reduce``/``all_gather``/``reduce_scatter``) and
  no compute runs: *exposed* communication; communication overlapped by compute is compute;
- **data wait**: time with neither, inside the DataLoader's ``enumerate(DataLoader)#…`` spans
  or before the step's first operator (the loop fetching its batch from any other iterable:
  ``prof.step()`` goes at the end of the loop body), always measured on the CPU clock;
- **other**: the rest of the window — Python, the optimizer's own bookkeeping, idle GPU time
  while the CPU launches work or synchronises.

The four are disjoint and add up to the window exactly. Top operators: CPU-side operators
(every event but the ``ProfilerStep#N`` annotations) grouped by name, ranked by self time on
the timeline's clock (CUDA: the device time of the kernels an operator launched itself; CPU:
its CPU time less its children's), ``share`` of the sum of all operators' self time.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

COMM_PATTERN = re.compile(
    r"nccl|gloo|c10d|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
    re.IGNORECASE,
)
DATA_PATTERN = re.compile(r"^enumerate\(DataLoader\)")
STEP_PATTERN = re.compile(r"^ProfilerStep[#*]")
SPLIT_KEYS = ("compute", "communication", "data_wait", "other")
TOP_OPS = 15

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Span:
    """One profiler event, times in microseconds. ``device``: ``cpu`` or ``cuda``;
    ``annotation``: a ``record_function`` range (a user annotation), not an operator;
    ``parents``: the names of the CPU events it runs inside, outermost first."""

    name: str
    start_us: float
    end_us: float
    device: str = "cpu"
    annotation: bool = False
    parents: tuple[str, ...] = ()
    self_cpu_us: float = 0.0
    self_device_us: float = 0.0


def summarise(
    spans: Sequence[Span], *, top: int = TOP_OPS, drop_last_step: bool = False
) -> dict[str, Any]:
    """``{device, steps, step_ms, wall_ms, split, top_ops, ops_self_ms}`` of the profiled
    window (see the module's docstring for each figure). ``drop_last_step``: the profiler was
    stopped mid-window, so the last step span (from the last ``step()`` to the stop) is not a
    whole step and is left out of the split."""
    windows = sorted((s.start_us, s.end_us) for s in spans if STEP_PATTERN.match(s.name))
    if drop_last_step:
        windows = windows[:-1]
    cuda = any(s.device == "cuda" for s in spans)
    totals = dict.fromkeys(SPLIT_KEYS, 0.0)
    for window, inside in zip(windows, _by_window(spans, windows), strict=True):
        for key, value in split_window(inside, window, cuda=cuda).items():
            totals[key] += value
    wall = sum(end - start for start, end in windows)
    ops, ops_total = top_operators(spans, cuda=cuda, top=top)
    return {
        "device": "cuda" if cuda else "cpu",
        "steps": len(windows),
        "step_ms": [round((end - start) / 1000, 3) for start, end in windows],
        "wall_ms": round(wall / 1000, 3),
        "split": {
            key: {"ms": round(value / 1000, 3), "share": round(value / wall, 4) if wall else 0.0}
            for key, value in totals.items()
        },
        "top_ops": ops,
        "ops_self_ms": round(ops_total / 1000, 3),
    }


def split_window(spans: Iterable[Span], window: Interval, *, cuda: bool) -> dict[str, float]:
    """Microseconds of compute, communication, data wait and other in one step window."""
    compute: list[Interval] = []
    comm: list[Interval] = []
    data: list[Interval] = []
    first_op = window[1]
    for span in spans:
        if STEP_PATTERN.match(span.name):
            continue
        piece = _clip((span.start_us, span.end_us), window)
        if piece is None:
            continue
        kind = _kind(span)
        if span.device == "cpu":
            if kind == "data":
                data.append(piece)
                continue
            if not span.annotation:
                first_op = min(first_op, piece[0])
            if cuda or (span.annotation and kind == "compute"):
                continue  # the CPU side of a CUDA run, or a neutral annotation
        (comm if kind == "comm" else compute).append(piece)
    if first_op > window[0]:
        data.append((window[0], first_op))
    busy = _merge(compute)
    comm_only = _minus(_merge(comm), busy)
    data_only = _minus(_merge(data), _merge(busy + comm_only))
    result = {
        "compute": _length(busy),
        "communication": _length(comm_only),
        "data_wait": _length(data_only),
    }
    result["other"] = max(0.0, (window[1] - window[0]) - sum(result.values()))
    return result


def top_operators(
    spans: Iterable[Span], *, cuda: bool, top: int = TOP_OPS
) -> tuple[list[dict[str, Any]], float]:
    """The ``top`` CPU-side operators by self time (``cuda``: device time) and the sum of all
    operators' self time (microseconds)."""
    groups: dict[str, list[float]] = {}
    for span in spans:
        if span.device != "cpu" or STEP_PATTERN.match(span.name):
            continue
        calls_cpu_dev = groups.setdefault(span.name, [0, 0.0, 0.0])
        calls_cpu_dev[0] += 1
        calls_cpu_dev[1] += span.self_cpu_us
        calls_cpu_dev[2] += span.self_device_us
    key = 2 if cuda else 1
    total = sum(values[key] for values in groups.values())
    ranked = sorted(groups.items(), key=lambda item: (-item[1][key], item[0]))[:top]
    return [
        {
            "name": name,
            "calls": int(calls),
            "self_ms": round((dev if cuda else cpu) / 1000, 3),
            "share": round((dev if cuda else cpu) / total, 4) if total else 0.0,
            "self_cpu_ms": round(cpu / 1000, 3),
            "self_device_ms": round(dev / 1000, 3) if cuda else None,
        }
        for name, (calls, cpu, dev) in ranked
    ], total


def _by_window(spans: Iterable[Span], windows: list[Interval]) -> list[list[Span]]:
    """The spans that overlap each window (sorted, disjoint), found by bisection."""
    starts = [start for start, _end in windows]
    buckets: list[list[Span]] = [[] for _ in windows]
    for span in spans:
        index = max(bisect.bisect_right(starts, span.start_us) - 1, 0)
        while index < len(windows) and windows[index][0] < span.end_us:
            if windows[index][1] > span.start_us:
                buckets[index].append(span)
            index += 1
    return buckets


def _kind(span: Span) -> str:
    names = (*span.parents, span.name) if span.device == "cpu" else (span.name,)
    if any(COMM_PATTERN.search(n) for n in names):
        return "comm"
    if any(DATA_PATTERN.match(n) for n in names):
        return "data"
    return "compute"


def _clip(interval: Interval, window: Interval) -> Interval | None:
    start, end = max(interval[0], window[0]), min(interval[1], window[1])
    return (start, end) if end > start else None


def _merge(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _minus(intervals: list[Interval], cut: list[Interval]) -> list[Interval]:
    """``intervals`` less ``cut`` (both merged and sorted), in one pass over both."""
    result: list[Interval] = []
    index = 0
    for first, end in intervals:
        start = first
        while index < len(cut) and cut[index][1] <= start:
            index += 1
        probe = index
        while probe < len(cut) and cut[probe][0] < end:
            cut_start, cut_end = cut[probe]
            if cut_start > start:
                result.append((start, cut_start))
            start = max(start, cut_end)
            if start >= end:
                break
            probe += 1
        if start < end:
            result.append((start, end))
    return result


def _length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in intervals)
