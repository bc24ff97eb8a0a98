"""The cost benchmarks' shared frame (benchmarks/cost/run.py, benchmarks/cost/accrual.py): the
median of timed runs, the ``--db`` loop that runs a benchmark once per database, writes each
result to ``benchmarks/cost/results/`` and prints it as a JSON line, and the Markdown table of
the results (one column a database) printed last."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

Result = dict[str, Any]


def median_s(fn: Callable[[], object], repeat: int) -> float:
    """The median of ``repeat`` timed calls of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def markdown_table(
    header: str, results: list[Result], rows: Iterable[tuple[str, list[str]]]
) -> str:
    """A table with a column per result (headed by its ``db``) and a line per (name, cells)."""
    lines = [f"| {header} | " + " | ".join(r["db"] for r in results) + " |",
             "|---|" + "---:|" * len(results)]  # fmt: skip
    lines.extend(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows)
    return "\n".join(lines)


def each_database(
    parser: argparse.ArgumentParser,
    bench: Callable[[str, argparse.Namespace], Result],
    table: Callable[[list[Result]], str],
    *,
    prefix: str = "",
) -> None:
    """Add ``--db`` (a comma-separated list, default both) to ``parser``, parse the command line
    and run ``bench`` for each database named: its result goes to
    ``results/<prefix><db>.json`` and out as a JSON line; then the table of them all."""
    parser.add_argument("--db", default="sqlite,postgresql")
    args = parser.parse_args()
    unknown = [kind for kind in args.db.split(",") if kind not in ("sqlite", "postgresql")]
    if unknown:  # before any run: argparse's usage line and exit 2
        parser.error(f"--db: {', '.join(map(repr, unknown))} is not sqlite or postgresql")
    RESULTS.mkdir(exist_ok=True)
    results = []
    for kind in args.db.split(","):
        found = bench(kind, args)
        (RESULTS / f"{prefix}{kind}.json").write_text(json.dumps(found, indent=2) + "\n")
        print(json.dumps(found), flush=True)
        results.append(found)
    print(table(results))
