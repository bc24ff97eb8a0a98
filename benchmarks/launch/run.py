"""Launch benchmark: time from `gpulease launch` to the user's first line of output on the local
provider (cold: the launch starts the server; warm: it is running), against a bare local
`bash -c 'echo'` measured in the same run; and the idle server's memory and CPU with 100 idle
clusters.

    python benchmarks/launch/run.py [--repeat 5] [--clusters 100] [--json results.json]

Runs in a fresh temporary GPULEASE_HOME and leaves nothing running. Targets (issue 3): under 3 s to
first output; under 150 MB for the idle server.
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

TASK = "name: {name}\nresources:\n  providers: [local]\nrun: echo first-line-{name}\n"
IDLE_TASK = {"name": None, "resources": {"providers": ["local"]}, "run": "true"}


def _first_line_seconds(exe: Path, home: Path, name: str) -> float:
    task = home / f"{name}.yaml"
    task.write_text(TASK.format(name=name))
    env = {**os.environ, "GPULEASE_HOME": str(home)}
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(exe), "launch", str(task)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    elapsed = float("nan")
    for line in proc.stdout:
        if f"first-line-{name}" in line:
            elapsed = time.perf_counter() - start
            break
    proc.wait(120)
    subprocess.run([str(exe), "down", name], env=env, capture_output=True, check=False, timeout=120)
    return elapsed


def _baseline_seconds() -> float:
    start = time.perf_counter()
    subprocess.run(["bash", "-c", "echo first-line"], capture_output=True, check=True)
    return time.perf_counter() - start


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_server(home: Path, clusters: int) -> dict[str, float]:
    os.environ["GPULEASE_HOME"] = str(home)
    from gpulease.client import connect, read_info

    client = connect()
    names = [f"idle{k}" for k in range(clusters)]
    for name in names:
        client.launch({**IDLE_TASK, "name": name}, name=name)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = {c["name"] for c in client.clusters() if c["status"] in {"succeeded", "failed"}}
        if set(names) <= done:
            break
        time.sleep(1.0)
    for name in names[: clusters // 2]:
        client.stop(name)
    time.sleep(10.0)  # let the stops settle
    info = read_info(home)
    assert info is not None
    cpu0, t0 = _cpu_seconds(info.pid), time.monotonic()
    time.sleep(10.0)
    cpu_share = (_cpu_seconds(info.pid) - cpu0) / (time.monotonic() - t0)
    result = {
        "clusters": float(clusters),
        "server_rss_mb": round(_rss_mb(info.pid), 1),
        "server_cpu_share": round(cpu_share, 4),
    }
    for name in names:
        client.down(name)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    exe = Path(sys.executable).parent / "gpulease"
    with tempfile.TemporaryDirectory(prefix="gpulease-bench-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {**os.environ, "GPULEASE_HOME": str(home)}
        try:
            cold = _first_line_seconds(exe, home, "cold")
            warm = [_first_line_seconds(exe, home, f"warm{k}") for k in range(args.repeat)]
            base = statistics.median(_baseline_seconds() for _ in range(args.repeat))
            idle = idle_server(home, args.clusters)
        finally:
            subprocess.run(
                [str(exe), "server", "stop"], env=env, capture_output=True, check=False, timeout=120
            )
    results = {
        "cold_first_output_s": round(cold, 3),
        "warm_first_output_s": round(statistics.median(warm), 3),
        "baseline_bash_echo_s": round(base, 4),
        "warm_x_baseline": round(statistics.median(warm) / base, 1),
        **idle,
    }
    print("| measure | value |\n|---|---:|")
    for key, value in results.items():
        print(f"| {key} | {value} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
