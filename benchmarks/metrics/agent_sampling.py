"""The node agent's telemetry sampling cost: the share of one CPU core a real agent process uses
with sampling every 1 s and every 5 s, against the same agent with sampling off
(``--metrics-interval 0``).

Three (by default) real ``python -m gpulease.agent serve`` processes run side by side, each on
its own node dir, with the same 8 fake GPUs (``--fake-gpus``: the Python fake sampler; the host
sampler is the real psutil one: CPU, memory, disk and network counters) and the same heartbeat.
Nobody polls them (no server: the cost measured is the sampling into the ring, not serving
``/v1/metrics``). After a warm-up, each process's CPU time (user + system, ``psutil``) is read at
the start and the end of the same wall-clock window; share of a core = CPU seconds / window
seconds. The sampling cost of an interval is its agent's share minus the "off" agent's share.

    python benchmarks/metrics/agent_sampling.py [--window 60] [--warmup 5] [--gpus 8]
        [--intervals 1,5] [--json out.json]

Target (issue 15): < 1 % of a core at a 1 s interval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
from _agent import agent_samples, fake_gpus, start_agent  # benchmarks/metrics/_agent.py


def _samples_taken(root: Path, since: float) -> tuple[int, int]:
    """(samples in the agent's ring taken after ``since``, GPUs in its newest): proof that it
    sampled, read once the window is over."""
    samples = agent_samples(root, since)
    return len(samples), len((samples[-1].get("gpus") or []) if samples else [])


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def measure(intervals: list[float], window_s: float, warmup_s: float, gpus: int) -> dict[str, Any]:
    """Start one agent per interval (0: sampling off), wait ``warmup_s``, then measure each
    process's CPU time over the same ``window_s``."""
    script = fake_gpus(gpus)
    with tempfile.TemporaryDirectory(prefix="gl-bench-agent-") as tmp:
        procs = {iv: start_agent(Path(tmp) / f"agent-{iv:g}", iv, script) for iv in intervals}
        try:
            time.sleep(warmup_s)
            watched = {iv: psutil.Process(p.pid) for iv, p in procs.items()}
            start_cpu = {iv: _cpu_s(w) for iv, w in watched.items()}
            started, since = time.monotonic(), time.time()
            time.sleep(window_s)
            wall = time.monotonic() - started
            used = {iv: _cpu_s(w) - start_cpu[iv] for iv, w in watched.items()}
            taken = {iv: _samples_taken(Path(tmp) / f"agent-{iv:g}", since) for iv in intervals}
        finally:
            for proc in procs.values():
                proc.terminate()
            for proc in procs.values():
                proc.wait(10)
    share = {iv: 100.0 * cpu / wall for iv, cpu in used.items()}
    rows = [{"interval_s": iv, "cpu_s": round(used[iv], 3), "core_pct": round(share[iv], 3),
             "sampling_cost_pct": round(share[iv] - share[0.0], 3) if iv else 0.0,
             "samples": taken[iv][0], "gpus_per_sample": taken[iv][1]}
            for iv in intervals]  # fmt: skip
    return {"window_s": round(wall, 2), "warmup_s": warmup_s, "gpus": gpus, "rows": rows,
            "cpus": os.cpu_count(), "python": sys.version.split()[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=60.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs per agent")
    parser.add_argument("--intervals", default="1,5", help="sampling intervals to measure (s)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    intervals = [0.0, *(float(x) for x in args.intervals.split(","))]
    result = measure(intervals, args.window, args.warmup, args.gpus)
    print(f"{args.gpus} fake GPUs, {result['window_s']} s window after {args.warmup} s warm-up")
    print("| sampling | samples taken | CPU s | share of one core | sampling cost (− off) |")
    print("|---|---:|---:|---:|---:|")
    for row in result["rows"]:
        name = f"every {row['interval_s']:g} s" if row["interval_s"] else "off"
        print(f"| {name} | {row['samples']} | {row['cpu_s']} | {row['core_pct']:.3f} % | "
              f"{row['sampling_cost_pct']:.3f} % |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
