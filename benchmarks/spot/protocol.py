"""The spot policy's tuning / validation protocol: every trace set of a split, on the problem grid
that fits its tick size, through :func:`gpulease.spot.run_spot_sim`, with the optimum cached.

    python benchmarks/spot/protocol.py TRACES_ROOT --split tuning|validation
        [--sets NAME,...] [--starts 100] [--seed 0] [--jobs 1] [--cache DIR]
        [--policy ...] [--json out.json] [--markdown out.md]

``TRACES_ROOT`` holds one folder per set of spot-traces JSON files (``aws-2022-10-26-1node/…``);
the split (which set is tuning, which validation) is :data:`SPLIT`. Constants and models of the
``gpulease`` policy are chosen on the tuning split only; the validation split is run once at the
end (benchmarks/README.md). Problem grid per set, from its tick (``gap_seconds``):

* ticks of 120 s or more: a 48 h job, deadlines 52, 60, 72, 80 h, changeovers 0.05 and 0.2 h;
* shorter ticks: an 8 h job, deadlines 9, 10, 12, 16 h, changeovers 0.005, 0.05 and 0.2 h (one
  shorter than the tick, two longer);
* sets whose counts go above 1 (multi-node): ``--nodes`` 1, 2, 4 (and 16 when the set has it).

Each (trace, nodes) is one ``run_spot_sim`` call with ``--starts`` windows drawn from
``random.Random(seed)``. The optimum of a window depends only on the window and the problem, so
it is cached in ``--cache`` (JSON lines keyed by a hash of both): reruns while tuning recompute
only the online policies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from summary import markdown_report

from gpulease.spot import Trace, WindowResult, load_trace, optimal_cost, run_spot_sim

POLICIES = "on_demand,greedy,uniform_progress,gpulease,optimal"

#: Which trace set is used for what. The three sets the project had before issue 13 tune; the two
#: added with it validate (never looked at while choosing constants or models).
SPLIT: dict[str, str] = {
    "aws-2022-10-26-1node": "tuning",
    "aws-2023-04-22-preemption-1node": "tuning",
    "aws-2023-08-27-16node": "tuning",
    "aws-2023-04-19-preemption-1node": "validation",
    "aws-2023-08-03-4node": "validation",
}

SHORT_TICK_S = 120.0


@dataclass(frozen=True)
class Grid:
    job_hours: float
    deadline_hours: tuple[float, ...]
    changeover_hours: tuple[float, ...]
    nodes: tuple[int, ...]


def grid_for(traces: Sequence[Trace]) -> Grid:
    """The problem grid of a set (module docstring)."""
    gap = traces[0].gap_seconds
    most = max(max(trace.data) for trace in traces)
    nodes = (1,) if most <= 1 else tuple(n for n in (1, 2, 4, 16) if n <= most)
    if gap >= SHORT_TICK_S:
        return Grid(48.0, (52.0, 60.0, 72.0, 80.0), (0.05, 0.2), nodes)
    return Grid(8.0, (9.0, 10.0, 12.0, 16.0), (0.005, 0.05, 0.2), nodes)


class OptimalCache:
    """:func:`optimal_cost` memoised on disk (one JSON-lines file per process)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.known: dict[str, dict[str, Any]] = {}
        self.hits = self.misses = 0
        if folder is None:
            return
        folder.mkdir(parents=True, exist_ok=True)
        for path in sorted(folder.glob("optimal-*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.known[row.pop("key")] = row

    @staticmethod
    def key(window: np.ndarray[Any, Any], params: dict[str, float]) -> str:
        digest = hashlib.sha1(np.packbits(np.asarray(window, dtype=bool)).tobytes())
        digest.update(f"{len(window)}|{sorted(params.items())!r}".encode())
        return digest.hexdigest()

    def __call__(self, window: np.ndarray[Any, Any], **params: float) -> WindowResult:
        key = self.key(window, params)
        row = self.known.get(key)
        if row is not None:
            self.hits += 1
            return WindowResult(**row)
        self.misses += 1
        result = optimal_cost(window, **params)
        row = {
            "cost": result.cost,
            "cost_ratio": result.cost_ratio,
            "finished": result.finished,
            "miss": result.miss,
            "spot_s": result.spot_s,
            "on_demand_s": result.on_demand_s,
            "ticks": result.ticks,
        }
        self.known[key] = row
        if self.folder is not None:
            path = self.folder / f"optimal-{os.getpid()}.jsonl"
            with path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, **row}) + "\n")
        return result


@dataclass(frozen=True)
class Unit:
    set_name: str
    path: Path
    nodes: int
    grid: Grid
    starts: int
    seed: int
    policies: tuple[str, ...]
    cache: Path | None


def run_unit(unit: Unit) -> tuple[list[dict[str, Any]], float]:
    """One trace at one node count: its cells (with the set's name) and the seconds it took."""
    trace = load_trace(unit.path)
    start = time.perf_counter()
    cells = run_spot_sim(
        [trace],
        job_hours=unit.grid.job_hours,
        deadline_hours=list(unit.grid.deadline_hours),
        changeover_hours=list(unit.grid.changeover_hours),
        policies=list(unit.policies),
        starts=unit.starts,
        seed=unit.seed,
        nodes=unit.nodes,
        optimal=OptimalCache(unit.cache),
    )
    rows = [{"set": unit.set_name, "gap_seconds": trace.gap_seconds, **c.as_dict()} for c in cells]
    return rows, time.perf_counter() - start


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="folder with one sub-folder per trace set")
    parser.add_argument("--split", choices=("tuning", "validation"), required=True)
    parser.add_argument("--sets", default="", help="only these sets (comma-separated)")
    parser.add_argument("--nodes", default="", help="only these node counts (comma-separated)")
    parser.add_argument("--starts", type=int, default=100, help="random windows per trace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--cache", type=Path, help="folder for the cached optimum")
    parser.add_argument("--policy", default=POLICIES, help="comma-separated policies")
    parser.add_argument("--json", type=Path, help="write every cell and the timing here")
    parser.add_argument("--markdown", type=Path, help="write the tables here too")
    return parser.parse_args(argv)


def units_for(args: argparse.Namespace) -> list[Unit]:
    wanted = {name for name in args.sets.split(",") if name}
    policies = tuple(name.strip() for name in args.policy.split(",") if name.strip())
    units = []
    for set_name, split in SPLIT.items():
        if split != args.split or (wanted and set_name not in wanted):
            continue
        paths = sorted((args.root / set_name).glob("*.json"))
        if not paths:
            raise SystemExit(f"error: {args.root / set_name}: no trace files")
        grid = grid_for([load_trace(path) for path in paths])
        only = {int(n) for n in args.nodes.split(",") if n}
        for nodes in grid.nodes:
            if only and nodes not in only:
                continue
            for path in paths:
                units.append(
                    Unit(set_name, path, nodes, grid, args.starts, args.seed, policies, args.cache)
                )
    return units


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    units = units_for(args)
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for unit, (cells, seconds) in zip(units, pool.map(run_unit, units), strict=True):
            rows.extend(cells)
            timings[f"{unit.set_name}/{unit.path.stem}/n{unit.nodes}"] = seconds
            name = f"{unit.set_name} {unit.path.stem} nodes={unit.nodes}"
            print(f"{name}: {seconds:.0f} s", flush=True)
    wall = time.perf_counter() - start
    policies = [name.strip() for name in args.policy.split(",") if name.strip()]
    report = markdown_report(rows, policies)
    print(report)
    print(f"\n{len(units)} runs × {args.starts} windows: {wall:.0f} s")
    if args.markdown:
        args.markdown.write_text(report + "\n", encoding="utf-8")
    if args.json:
        doc = {
            "split": args.split,
            "wall_seconds": wall,
            "seconds_per_run": timings,
            "args": {**vars(args), "root": str(args.root), "json": str(args.json)},
            "cells": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
