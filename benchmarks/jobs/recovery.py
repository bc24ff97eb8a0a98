"""Recovery time of a managed spot job on the sim provider: from the preemption notice to the
user's code running again on the next attempt, minus the simulated provisioning delay (set to 0
here, so nothing is subtracted).

The sim clock runs at real time (``time_scale: 1``); spot is always obtainable and each spot node
is preempted after an exponential time (``preemptions_per_hour``), with ``--notice`` seconds of
warning. The task appends a timestamp to a file whenever it starts. The agent relays the notice,
the task stops, and the next attempt starts at once — often before the node is actually taken.
Per preemption (times from the sim provider's records): recovery = start of the next attempt's
user code − the notice; downtime = how long after the preemption itself the code was not running
(0 when it already ran elsewhere). A node taken again before its code ran counts once, with the
later preemption. Baseline, in the same run: the first launch (job submitted → code running).

    python benchmarks/jobs/recovery.py [--preemptions 6] [--notice 2] [--json out.json]
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


def _setup(home: Path, rate_per_hour: float, notice_s: float) -> Path:
    home.mkdir(parents=True)
    (home / "config.yaml").write_text(
        "providers:\n  sim:\n    time_scale: 1\n    provision_seconds: [0, 0]\n"
        f"    notice_seconds: {notice_s}\n    preemptions_per_hour: {rate_per_hour}\n"
        "    seed: 7\n"
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


def _recoveries(starts: list[float], taken: list[float], notice_s: float) -> list[dict[str, float]]:
    """Per preemption: its notice, the next start of user code after that notice (if before the
    next notice), the time from notice to code running, and the downtime after the preemption
    itself (0 when the next attempt was already running: the notice was used to move early)."""
    found: list[dict[str, float]] = []
    for i, at in enumerate(taken):
        notice = at - notice_s
        following = min((s for s in starts if s > notice), default=None)
        later = taken[i + 1] - notice_s if i + 1 < len(taken) else float("inf")
        if following is None or following >= later:
            continue  # taken again before its code ran: counted with the later preemption
        found.append(
            {
                "from_notice_s": round(following - notice, 3),
                "downtime_s": round(max(0.0, following - at), 3),
            }
        )
    return found


def measure(preemptions: int, rate_per_hour: float, notice_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpulease-recovery-") as tmp:
        home = Path(tmp) / "home"
        task = _setup(home, rate_per_hour, notice_s)
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
    found = _recoveries(starts, taken, notice_s)[:preemptions]
    first_launch = starts[0] - submitted
    from_notice = [r["from_notice_s"] for r in found]
    downtime = [r["downtime_s"] for r in found]
    median = statistics.median(from_notice) if found else None
    return {
        "preemptions": len(found),
        "notice_s": notice_s,
        "recoveries": found,
        "median_from_notice_s": round(median, 3) if median is not None else None,
        "max_from_notice_s": max(from_notice, default=None),
        "max_downtime_s": max(downtime, default=None),
        "first_launch_s": round(first_launch, 3),
        "median_vs_first_launch": round(median / first_launch, 3) if median else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preemptions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=120.0, help="preemptions per node-hour")
    parser.add_argument("--notice", type=float, default=2.0, help="seconds of warning (AWS: 120)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = measure(args.preemptions, args.rate, args.notice)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
