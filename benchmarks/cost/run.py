"""``gpulease cost`` over a synthetic ledger of 1,000,000 rows, on SQLite and PostgreSQL.

For each database: the migrated schema is filled (benchmarks/cost/synthetic.py), then, in the
same run, timed as medians of ``--repeat`` runs:

- the baseline: ``SELECT sum(cost_usd) FROM ledger_entries`` over the same rows (after one
  untimed read of each, so no run pays for the first read after the fill);
- the report function, ``gpulease.cost.report.cost_report`` (totals, breakdown, spot savings,
  estimated against actual, forecast) for ``--since 30d`` with each ``--by``, and for a month;
- the whole CLI, ``gpulease cost --json`` as a subprocess against a real server over that DB
  (started once beforehand, as a user's would be).

Usage: ``.venv/bin/python benchmarks/cost/run.py [--rows 1000000] [--db sqlite,postgresql]``.
Writes ``benchmarks/cost/results/<db>.json`` and prints a Markdown table. Target (issue 16): the
report in < 1 s at 1M rows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.cost.databases import database  # noqa: E402
from benchmarks.cost.harness import Result, each_database, markdown_table, median_s  # noqa: E402
from benchmarks.cost.synthetic import fill  # noqa: E402
from sqlalchemy import Connection, Engine, text  # noqa: E402

from gpulease.clock import VirtualClock  # noqa: E402
from gpulease.cost.estimates import estimated_against_actual  # noqa: E402
from gpulease.cost.overlap import Window  # noqa: E402
from gpulease.cost.period import GROUPS, month_of  # noqa: E402
from gpulease.cost.report import breakdown, cost_report, forecast  # noqa: E402
from gpulease.state import upgrade  # noqa: E402


def _cli(home: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "GPULEASE_HOME": str(home), **env}
    cmd = [sys.executable, "-m", "gpulease", *args]
    return subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True, check=True)


def bench(kind: str, engine: Engine, home: Path, env: dict[str, str], args: Any) -> dict[str, Any]:
    now = time.time()
    began = time.perf_counter()
    upgrade(engine)
    fill(engine, args.rows, now)
    fill_s = time.perf_counter() - began
    clock = VirtualClock(now)
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM ledger_entries")).scalar_one()

    def baseline() -> None:
        with engine.connect() as conn:
            conn.execute(text("SELECT sum(cost_usd) FROM ledger_entries")).scalar_one()

    out: dict[str, Any] = {"db": kind, "rows": count, "fill_s": round(fill_s, 1)}
    baseline()  # a first read after the fill (PostgreSQL sets hint bits), untimed
    cost_report(engine, by="day", clock=clock)
    out["baseline_s"] = median_s(baseline, args.repeat)
    report: dict[str, Any] = {}
    for by in GROUPS:
        run = lambda by=by: report.update(cost_report(engine, by=by, clock=clock))  # noqa: E731
        out[f"report_since30d_by_{by}_s"] = median_s(run, args.repeat)
    parts = _parts(engine, now)
    for name, fn in parts.items():
        out[f"part_{name}_s"] = median_s(fn, args.repeat)
    month = month_of(now - 86400 * 20)[0]
    run_month = lambda: cost_report(engine, month=month, by="day", clock=clock)  # noqa: E731
    out[f"report_month_{month}_by_day_s"] = median_s(run_month, args.repeat)
    out["report_total_usd"] = round(report["total"]["cost_usd"], 2)
    _cli(home, env, "cost", "--json")  # starts the server (not timed)
    try:
        out["cli_json_by_day_s"] = median_s(lambda: _cli(home, env, "cost", "--json"), args.repeat)
        out["cli_json_by_cluster_s"] = median_s(
            lambda: _cli(home, env, "cost", "--by", "cluster", "--json"), args.repeat
        )
        out["cli_version_s"] = median_s(lambda: _cli(home, env, "version"), args.repeat)
    finally:
        subprocess.run([sys.executable, "-m", "gpulease", "server", "stop"], cwd=ROOT,
                       env={**os.environ, "GPULEASE_HOME": str(home), **env},
                       capture_output=True, check=False)  # fmt: skip
    return out


def _parts(engine: Engine, now: float) -> dict[str, Callable[[], object]]:
    """The statements of one ``--since 30d --by day`` report, each alone."""
    window = Window(now - 30 * 86400, now)

    def part(fn: Callable[[Connection], object]) -> Callable[[], object]:
        def run() -> object:
            with engine.connect() as conn:
                return fn(conn)

        return run

    return {
        "breakdown_by_day": part(lambda c: breakdown(c, window, "day")),
        "breakdown_by_provider": part(lambda c: breakdown(c, window, "provider")),
        "estimates": part(lambda c: estimated_against_actual(c, window)),
        "forecast": part(lambda c: forecast(c, now)),
    }


def run(kind: str, args: Any) -> dict[str, Any]:
    with database(kind, "cost-bench") as (engine, url, folder):
        env = {} if kind == "sqlite" else {"GPULEASE_DB_URL": url}
        return bench(kind, engine, folder / "home", env, args)


def table(results: list[Result]) -> str:
    keys = [k for k in results[0] if k.endswith("_s") and k != "fill_s"]
    cells = [[f"{r[key] * 1000:.0f} ms" if key in r else "—" for r in results] for key in keys]
    rows = [(key.removesuffix("_s"), line) for key, line in zip(keys, cells, strict=True)]
    rows.append(("rows", [f"{r['rows']:,}" for r in results]))
    rows.append(("fill (s)", [str(r["fill_s"]) for r in results]))
    return markdown_table("measurement", results, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    each_database(parser, run, table)


if __name__ == "__main__":
    main()
