"""Bench benchmark: how long ``python -m gpulease.bench`` takes here, and whether its figures
agree with plain measurements of the same thing taken in the same run.

    python benchmarks/bench/run.py [--repeat 3] [--workdir DIR] [--no-full] [--json results.json]

1. **Wall time** of ``python -m gpulease.bench --quick --json`` (target < 30 s on the project's
   2-core CPU machine; acceptance runs it on every node before ``setup``) and of the full run
   (``--store local://`` so that every CPU check runs, train included), as subprocesses, against
   a bare ``python -c pass`` start.
2. **Figures against baselines**, interleaved with the bench runs so that drift hits both:
   ``matmul.fp32`` against a plain ``a @ b`` of the same size timed with ``perf_counter`` (median
   of as many repeats after a warm-up: a ratio near 1 means the bench adds nothing and loses
   nothing);
   ``disk.seq_write`` / ``disk.seq_read`` against ``dd bs=1M oflag=direct conv=fsync`` /
   ``iflag=direct`` of the same size in the same directory (the seconds ``dd`` reports itself):
   32 MiB around each quick run, 256 MiB before and after the full run (their mean).

Prints Markdown tables (the ones in benchmarks/README.md).
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

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
MATMUL_N = 1024  # the quick run's size
DISK_MIB = 32  # the quick run's size
FULL_DISK_MIB = 256  # the full run's


def _timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(argv, env=ENV, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, out


def bench(workdir: Path, *extra: str) -> tuple[float, dict[str, Any]]:
    """Seconds of one ``python -m gpulease.bench --json`` and its report (as JSON)."""
    from gpulease.bench.report import report_from_output

    seconds, out = _timed([sys.executable, "-m", "gpulease.bench", "--json", "--workdir",
                           str(workdir), *extra])  # fmt: skip
    report = report_from_output(out)
    assert report is not None, out[-2000:]
    return seconds, report.to_json()


def plain_matmul(repeats: int = 5) -> float:
    """TFLOP/s of numpy's ``a @ b`` at the quick size, median of ``repeats`` after one warm-up
    (what the bench does, written plainly)."""
    import numpy as np

    rng = np.random.default_rng(1)
    a = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((MATMUL_N, MATMUL_N), dtype=np.float32)
    a @ b
    median = statistics.median(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * MATMUL_N**3 / median / 1e12


def _seconds(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _dd_seconds(argv: list[str]) -> float:
    """The seconds ``dd`` itself reports (``... copied, 0.0234 s, 1.4 GB/s``: no exec time)."""
    err = subprocess.run(argv, capture_output=True, text=True, check=True).stderr
    line = next(ln for ln in err.splitlines() if " copied, " in ln)
    return float(line.split(" copied, ")[1].split(" s")[0].replace(",", "."))


def plain_dd(workdir: Path, mib: int = DISK_MIB) -> tuple[float, float]:
    """MB/s of ``dd`` writing (O_DIRECT, fsync) then reading (O_DIRECT) ``mib`` MiB."""
    path = Path(tempfile.mkdtemp(dir=workdir)) / "dd.bin"
    try:
        write_s = _dd_seconds(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}",
                               "oflag=direct", "conv=fsync"])  # fmt: skip
        read_s = _dd_seconds(["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=direct"])
    finally:
        path.unlink(missing_ok=True)
        path.parent.rmdir()
    mb = mib * 1.048576
    return mb / write_s, mb / read_s


def _figure(report: dict[str, Any], name: str) -> float:
    return next(float(c["figure"]) for c in report["checks"] if c["name"] == name)


def run(repeat: int, workdir: Path, full: bool) -> dict[str, Any]:
    start_s = statistics.median(_timed([sys.executable, "-c", "pass"])[0] for _ in range(5))
    rows: dict[str, list[float]] = {k: [] for k in (
        "quick_s", "bench_matmul", "plain_matmul", "bench_write", "dd_write", "bench_read",
        "dd_read")}  # fmt: skip
    for _ in range(repeat):
        rows["plain_matmul"].append(plain_matmul())
        dd_write, dd_read = plain_dd(workdir)
        rows["dd_write"].append(dd_write)
        rows["dd_read"].append(dd_read)
        seconds, report = bench(workdir, "--quick")
        rows["quick_s"].append(seconds)
        rows["bench_matmul"].append(_figure(report, "matmul.fp32"))
        rows["bench_write"].append(_figure(report, "disk.seq_write"))
        rows["bench_read"].append(_figure(report, "disk.seq_read"))
    result: dict[str, Any] = {k: statistics.median(v) for k, v in rows.items()}
    result.update(python_start_s=start_s, repeat=repeat, quick_report_wall_s=report["wall_s"])
    if full:
        before = plain_dd(workdir, FULL_DISK_MIB)
        store = Path(tempfile.mkdtemp(dir=workdir))
        try:
            seconds, full_report = bench(workdir, "--store", f"local://{store}")
        finally:
            store.rmdir()
        after = plain_dd(workdir, FULL_DISK_MIB)
        result.update(
            full_s=seconds,
            full_report_wall_s=full_report["wall_s"],
            full_checks={c["name"]: c["figure"] for c in full_report["checks"]},
            full_bench_write=_figure(full_report, "disk.seq_write"),
            full_bench_read=_figure(full_report, "disk.seq_read"),
            full_dd_write=statistics.mean((before[0], after[0])),
            full_dd_read=statistics.mean((before[1], after[1])),
        )
    return result


def table(r: dict[str, Any]) -> str:
    lines = ["| command | median wall (s) | × `python -c pass` |", "|---|---:|---:|",
             f"| `python -c pass` (baseline) | {r['python_start_s']:.3f} | 1.0 |",
             f"| `python -m gpulease.bench --quick --json` | {r['quick_s']:.2f} | "
             f"{r['quick_s'] / r['python_start_s']:.0f} |"]  # fmt: skip
    if "full_s" in r:
        lines.append(
            f"| `python -m gpulease.bench --json --store local://…` (full, 1 run) | "
            f"{r['full_s']:.2f} | {r['full_s'] / r['python_start_s']:.0f} |"
        )
    lines += [
        "",
        "| figure | the bench | plain baseline | bench ÷ baseline |",
        "|---|---:|---:|---:|",
    ]
    pairs = [
        ("matmul.fp32 (TFLOP/s)", "bench_matmul", "plain_matmul", f"numpy `a @ b` n={MATMUL_N}"),
        ("disk.seq_write (MB/s)", "bench_write", "dd_write", "`dd oflag=direct conv=fsync`"),
        ("disk.seq_read (MB/s)", "bench_read", "dd_read", "`dd iflag=direct`"),
    ]
    if "full_bench_write" in r:
        pairs += [
            ("full disk.seq_write (MB/s)", "full_bench_write", "full_dd_write", "the same dd"),
            ("full disk.seq_read (MB/s)", "full_bench_read", "full_dd_read", "the same dd"),
        ]
    for name, ours, theirs, base in pairs:
        lines.append(
            f"| {name} vs {base} | {r[ours]:.4g} | {r[theirs]:.4g} | {r[ours] / r[theirs]:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--no-full", action="store_true", help="skip the full run")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    result = run(args.repeat, args.workdir, not args.no_full)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))


if __name__ == "__main__":
    main()
