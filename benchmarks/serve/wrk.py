"""Debian's ``wrk`` (C, far cheaper per request than the Python generator) as a closed-loop
throughput probe, when it is on PATH (``apt-get install wrk``); only against this machine.

``wrk_run(url, concurrency, seconds)`` → :class:`WrkResult` (``wrk -t1 -c{concurrency}
--latency``: one thread, whole seconds), or None without wrk; ``read_wrk`` reads its output.
wrk keeps no per-request record, so this is its summary only: requests, failures (non-2xx/3xx
answers and socket errors), the rate and p50 / p99.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from benchmarks.serve.loadgen import check_url


@dataclass(frozen=True)
class WrkResult:
    seconds: float
    requests: int
    failed: int
    req_per_s: float
    p50_ms: float | None
    p99_ms: float | None


def _ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if match is None:
        raise ValueError(f"wrk printed a latency this does not read: {text!r}")
    value, unit = match.groups()
    return round(float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit], 3)


def _percentile(out: str, label: str) -> float | None:
    match = re.search(rf"^\s*{label}%\s+(\S+)\s*$", out, re.MULTILINE)
    return _ms(match.group(1)) if match else None


def read_wrk(out: str, seconds: float) -> WrkResult:
    """What ``wrk --latency`` printed (a run of ``seconds``), read back."""
    total = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = int(bad.group(1)) if bad else 0
    failed += sum(int(g) for g in errors.groups()) if errors else 0
    return WrkResult(
        seconds=seconds,
        requests=int(total.group(1)) if total else 0,
        failed=failed,
        req_per_s=float(rate.group(1)) if rate else 0.0,
        p50_ms=_percentile(out, "50"),
        p99_ms=_percentile(out, "99"),
    )


def wrk_run(url: str, concurrency: int, seconds: float) -> WrkResult | None:
    """``wrk -t1 -c{concurrency} -d{seconds}s --latency url``; None when wrk is not installed."""
    binary = shutil.which("wrk")
    if binary is None:
        return None
    duration = max(1, round(seconds))
    out = subprocess.run(
        [binary, "-t1", f"-c{concurrency}", f"-d{duration}s", "--latency", check_url(url)],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 30,
    ).stdout
    return read_wrk(out, float(duration))
