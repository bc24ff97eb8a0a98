"""One examples/serve-digits replica under load: its capacity, then its latency at a fixed share of
that capacity, measured directly with the bounded load generator (loadgen.py) on this machine.

    python benchmarks/serve/replica.py [--model model.onnx] [--share 0.7] [--seconds 10]
        [--rates 100,200,...,2000] [--json benchmarks/serve/results/replica.json]

Steps: export the model (``train_digits.py --epochs 3 --onnx``) unless ``--model`` names one;
start ``app.py`` on a free loopback port; run each ``--rates`` step for ``--step-seconds`` and take
as capacity the highest achieved rate of a step that kept up (achieved ≥ 95 % of the schedule, no
failure, p99 < 50 ms); then run ``--share`` of it for ``--seconds`` on a fresh replica (the step
that did not keep up leaves a backlog) and report p50/p95/p99. These
are the "direct" figures the proxy's added latency is measured against (issue 17, Numbers).
Prints a Markdown table; ``--json`` keeps everything.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.serve.loadgen import Schedule, run_load  # noqa: E402
from benchmarks.serve.stats import LoadResult  # noqa: E402

APP = ROOT / "examples" / "serve-digits" / "app.py"
TRAIN = ROOT / "examples" / "train" / "train_digits.py"
BODY = (ROOT / "examples" / "serve-digits" / "request.json").read_bytes()


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, help="an exported model.onnx (default: train one)")
    parser.add_argument("--rates", default="100,200,300,400,500,600,800,1000,1200,1600,2000")
    parser.add_argument("--step-seconds", type=float, default=3.0)
    parser.add_argument("--share", type=float, default=0.7, help="of the capacity, for the run")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


def _export(directory: Path) -> Path:
    out = directory / "model.onnx"
    subprocess.run(
        [sys.executable, str(TRAIN), "--epochs", "3", "--onnx", str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return out


def _start_app(model: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PORT": "0", "BIND_HOST": "127.0.0.1", "MODEL": str(model)}
    proc = subprocess.Popen([sys.executable, str(APP)], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout
    match = re.match(r"serve-digits on (http://\S+)", proc.stdout.readline())
    if not match:
        proc.kill()
        raise SystemExit("app.py did not start")
    base = match.group(1)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=5) as response:
                if response.status == 200:
                    return proc, base
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("app.py never became ready")


def _row(label: str, rate: float, result: LoadResult) -> dict[str, Any]:
    s = result.summary()
    return {"run": label, "target_rps": round(rate, 1), **s}


def _kept_up(rate: float, result: LoadResult) -> bool:
    p99 = result.latency_s(99)
    return (
        result.failed == 0
        and result.achieved_rps >= 0.95 * rate
        and p99 is not None
        and p99 < 0.050
    )


def capacity(base: str, args: argparse.Namespace) -> tuple[float, list[dict[str, Any]]]:
    """Rate steps until one does not keep up: the last achieved rate that did, and the rows."""
    url = f"{base}/predict"
    rows, kept = [], 0.0
    run_load(url, Schedule.constant(100, 1.0), body=BODY)  # warm-up: connections, ORT arenas
    for rate in (float(r) for r in args.rates.split(",")):
        result = run_load(url, Schedule.constant(rate, args.step_seconds), body=BODY)
        rows.append(_row("capacity step", rate, result))
        if not _kept_up(rate, result):
            break
        kept = result.achieved_rps
    if kept == 0:
        raise SystemExit("the replica kept up with no rate step")
    return kept, rows


def at_share(base: str, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    url = f"{base}/predict"
    run_load(url, Schedule.constant(100, 1.0), body=BODY)  # warm-up
    result = run_load(url, Schedule.constant(rate, args.seconds), body=BODY)
    return _row(f"{args.share:.0%} of capacity (fresh replica)", rate, result)


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | target req/s | achieved req/s | requests | failed | p50 ms | p95 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lat = row["latency_ms"]
        lines.append(
            f"| {row['run']} | {row['target_rps']:g} | {row['achieved_rps']:g} | "
            f"{row['requests']} | {row['failed']} | {lat['p50']} | {lat['p95']} | {lat['p99']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        model = args.model or _export(Path(tmp))
        proc, base = _start_app(model)
        try:
            kept, rows = capacity(base, args)
        finally:
            proc.terminate()
            proc.wait(60)
        proc, base = _start_app(model)  # the overloaded step leaves a backlog behind: start anew
        try:
            rows.append(at_share(base, args.share * kept, args))
        finally:
            proc.terminate()
            proc.wait(60)
    print(_table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(),
        }
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
