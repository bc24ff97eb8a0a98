"""Spot policy benchmark: every policy (on_demand, greedy, uniform_progress, gpulease, optimal) on
random windows of the spot traces given as arguments, through :func:`gpulease.spot.run_spot_sim`.

    python benchmarks/spot/run.py TRACE.json... [--job-hours 48]
        [--deadline-hours 52,56,60,64,68,72,76,80] [--changeover-hours 0.05,0.2]
        [--starts 100] [--seed 0] [--nodes 1] [--policy ...] [--json results.json]

Prints a Markdown table: per trace × deadline × changeover, the mean cost ratio (cost ÷ the
all-on-demand cost) of each policy with its misses, and the share of uniform_progress's gap to
the optimum that gpulease closes, ``(UP − gpulease) / (UP − optimal)``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

POLICIES = "on_demand,greedy,uniform_progress,gpulease,optimal"


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path, help="spot-traces JSON files")
    parser.add_argument("--job-hours", type=float, default=48.0)
    parser.add_argument(
        "--deadline-hours", type=_floats, default=_floats("52,56,60,64,68,72,76,80")
    )
    parser.add_argument("--changeover-hours", type=_floats, default=_floats("0.05,0.2"))
    parser.add_argument("--starts", type=int, default=100, help="random windows per trace")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--od-price", type=float, default=3.06)
    parser.add_argument("--spot-price", type=float, default=0.9731)
    parser.add_argument("--policy", default=POLICIES, help="comma-separated policies")
    parser.add_argument("--json", type=Path, help="write every cell and the timing here")
    return parser.parse_args(argv)


def _closed(ratios: dict[str, float]) -> str:
    """gpulease's share of uniform_progress's gap to optimal, as a percentage."""
    if not {"uniform_progress", "gpulease", "optimal"} <= ratios.keys():
        return "—"
    gap = ratios["uniform_progress"] - ratios["optimal"]
    if gap <= 1e-12:
        return "—"
    return f"{(ratios['uniform_progress'] - ratios['gpulease']) / gap:.0%}"


def markdown(cells: list[dict[str, Any]], policies: list[str]) -> str:
    groups: dict[tuple[str, float, float], dict[str, dict[str, Any]]] = {}
    for cell in cells:
        key = (cell["trace"], cell["deadline_hours"], cell["changeover_hours"])
        groups.setdefault(key, {})[cell["policy"]] = cell
    header = ["trace", "D h", "d h", *policies, "gpulease closes"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (trace, deadline, changeover), by_policy in groups.items():
        row = [trace, f"{deadline:g}", f"{changeover:g}"]
        for name in policies:
            cell = by_policy[name]
            misses = f" ({cell['misses']} miss)" if cell["misses"] else ""
            row.append(f"{cell['mean_cost_ratio']:.3f}{misses}")
        row.append(_closed({name: c["mean_cost_ratio"] for name, c in by_policy.items()}))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from gpulease.errors import UserInputError
    from gpulease.spot import load_trace, run_spot_sim

    args = _args(argv)
    policies = [name.strip() for name in args.policy.split(",") if name.strip()]
    try:
        traces = [load_trace(path) for path in args.traces]
        start = time.perf_counter()
        cells = run_spot_sim(
            traces,
            job_hours=args.job_hours,
            deadline_hours=args.deadline_hours,
            changeover_hours=args.changeover_hours,
            policies=policies,
            starts=args.starts,
            seed=args.seed,
            nodes=args.nodes,
            od_price=args.od_price,
            spot_price=args.spot_price,
        )
        wall = time.perf_counter() - start
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rows = [cell.as_dict() for cell in cells]
    print(markdown(rows, policies))
    print(f"\n{len(traces)} trace(s) × {args.starts} windows: {wall:.1f} s")
    if args.json:
        doc = {
            "wall_seconds": wall,
            "args": {**vars(args), "traces": [str(p) for p in args.traces], "json": str(args.json)},
            "cells": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
