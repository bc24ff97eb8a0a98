"""Recovery time of a managed spot job on the sim provider: from the moment the simulated cloud
takes the node back to the moment the user's code runs again on the next attempt, minus the
simulated provisioning delay (set to 0 here, so nothing is subtracted).

The sim clock runs at real time (``time_scale: 1``); spot is always obtainable and each spot node
is preempted after an exponential time (``preemptions_per_hour``), with a 2 s notice. The task
appends a timestamp to a file whenever it starts. Per preemption: recovery = start of the next
attempt's user code − the node's preemption time (from the sim provider's records); a node taken
again before its code ran makes one recovery, counted from the later preemption. Baseline, in
the same run: the first launch (job submitted → user code running).

    python benchmarks/jobs/recovery.py [--preemptions 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _cli(home: Path, *args: str) -> str:
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "gpulease", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    return done.stdout


def _setup(home: Path, rate_per_hour: float) -> Path:
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 1\n    provision_seconds: [0, 0]\n"
        f"    notice_seconds: 2\n    preemptions_per_hour: {rate_per_hour}\n    seed: 7\n"
    )
    marks = home / "starts.txt"
    task = home / "task.yaml"
    task.write_text(
        "name: recovery\nresources:\n  accelerators: T4:1\n  use_spot: true\n"
        "job_recovery:\n  strategy: next_region\n"
        f"envs:\n  MARKS: {marks}\n"
        'run: |\n  python -c "import time; print(time.time())" >> "$MARKS"\n  sleep 100000\n'
    )
    return task


def _starts(home: Path) -> list[float]:
    path = home / "starts.txt"
    return [float(x) for x in path.read_text().split()] if path.exists() else []


def _preempt_times(home: Path) -> list[float]:
    records = json.loads((home / "sim" / "sim.json").read_text())
    return sorted(r["preempt_at"] for r in records.values() if r["preempted"])


def _recoveries(starts: list[float], taken: list[float]) -> list[float]:
    """Next start − preemption, for preemptions followed by a start before the next preemption
    (a node preempted again before its code ran is one longer recovery, counted once, from the
    later preemption)."""
    found: list[float] = []
    for i, at in enumerate(taken):
        following = min((s for s in starts if s > at), default=None)
        later = taken[i + 1] if i + 1 < len(taken) else float("inf")
        if following is not None and following < later:
            found.append(following - at)
    return found


def measure(preemptions: int, rate_per_hour: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpulease-recovery-") as tmp:
        home = Path(tmp) / "home"
        task = _setup(home, rate_per_hour)
        submitted = time.time()
        _cli(home, "jobs", "launch", str(task), "--provider", "sim", "--detach")
        try:
            deadline = time.time() + 60 + preemptions * (3600 / rate_per_hour) * 4
            while len(_starts(home)) < preemptions + 1 and time.time() < deadline:
                time.sleep(0.5)
        finally:
            _cli(home, "jobs", "cancel", "1")
            time.sleep(3)
            _cli(home, "server", "stop")
        starts = _starts(home)
        taken = _preempt_times(home)
    recoveries = _recoveries(starts, taken)[:preemptions]
    first_launch = starts[0] - submitted
    return {
        "preemptions": len(recoveries),
        "recovery_s": [round(r, 3) for r in recoveries],
        "median_s": round(statistics.median(recoveries), 3) if recoveries else None,
        "max_s": round(max(recoveries), 3) if recoveries else None,
        "first_launch_s": round(first_launch, 3),
        "median_vs_first_launch": round(statistics.median(recoveries) / first_launch, 3)
        if recoveries
        else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=120.0, help="preemptions per node-hour")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.preemptions, args.rate)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
