"""Bounded load generators for benchmarks/serve/proxy.py, only against 127.0.0.1.

- :func:`closed` — ``concurrency`` connections sending as fast as they are answered for
  ``seconds`` (throughput), asyncio + aiohttp client;
- :func:`open_loop` — request i leaves at t0 + i / rate whatever the answers (latency at a fixed
  rate); ``rate × seconds`` requests per target, at most ``cap`` in flight, the targets taking
  turns in slices; the schedule's lag (how late the generator sent) is reported so that a
  generator that could not keep up is seen;
- :func:`wrk` — Debian's ``wrk`` (C, far cheaper per request than Python) when it is on PATH.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp


@dataclass(frozen=True)
class Run:
    what: str
    tool: str
    seconds: float
    requests: int
    failed: int
    req_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    lag_p99_ms: float | None = None


def _local(url: str) -> str:
    if urlsplit(url).hostname != "127.0.0.1":
        raise ValueError(f"load only against 127.0.0.1, not {url}")
    return url


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


def _run(what: str, seconds: float, latencies: list[float], failed: int, **extra: object) -> Run:
    return Run(
        what=what,
        tool="python",
        seconds=round(seconds, 3),
        requests=len(latencies) + failed,
        failed=failed,
        req_per_s=round(len(latencies) / seconds, 1),
        p50_ms=_ms(quantile(latencies, 0.50)),
        p99_ms=_ms(quantile(latencies, 0.99)),
        **extra,  # type: ignore[arg-type]
    )


async def _get(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            await response.read()
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def closed(what: str, url: str, concurrency: int, seconds: float) -> Run:
    latencies: list[float] = []
    failed = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal failed
            while time.perf_counter() < deadline:
                sent = time.perf_counter()
                if await _get(session, _local(url)):
                    latencies.append(time.perf_counter() - sent)
                else:
                    failed += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return _run(what, elapsed, latencies, failed)


class _Tally:
    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.lags: list[float] = []
        self.failed = 0
        self.seconds = 0.0


async def _open_slice(
    session: aiohttp.ClientSession,
    url: str,
    rate: float,
    seconds: float,
    *,
    cap: int,
    tally: _Tally,
) -> None:
    in_flight = 0

    async def one() -> None:
        nonlocal in_flight
        sent = time.perf_counter()
        ok = await _get(session, url)
        in_flight -= 1
        if ok:
            tally.latencies.append(time.perf_counter() - sent)
        else:
            tally.failed += 1

    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = started + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tally.lags.append(max(0.0, time.perf_counter() - due))
        if in_flight >= cap:  # the target fell behind by `cap` requests: count, go on
            tally.failed += 1
            continue
        in_flight += 1
        tasks.append(asyncio.create_task(one()))
    await asyncio.gather(*tasks)
    tally.seconds += time.perf_counter() - started


async def open_loop(
    targets: dict[str, str], rate: float, seconds: float, *, slices: int = 1, cap: int = 256
) -> dict[str, Run]:
    """Each target at ``rate`` for ``seconds`` in all, the targets taking turns in ``slices``
    slices (so that they share whatever else loads the machine meanwhile)."""
    tallies = {name: _Tally() for name in targets}
    sessions = {
        name: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=cap)) for name in targets
    }
    try:
        for _ in range(slices):
            for name, url in targets.items():
                await _open_slice(
                    sessions[name],
                    _local(url),
                    rate,
                    seconds / slices,
                    cap=cap,
                    tally=tallies[name],
                )
    finally:
        for session in sessions.values():
            await session.close()
    return {
        name: _run(name, t.seconds, t.latencies, t.failed, lag_p99_ms=_ms(quantile(t.lags, 0.99)))
        for name, t in tallies.items()
    }


def _wrk_ms(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return round(float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit], 3)


def wrk(what: str, url: str, concurrency: int, seconds: float) -> Run | None:
    """``wrk -t1 -c{concurrency}``; None when wrk is not installed."""
    binary = shutil.which("wrk")
    if binary is None:
        return None
    duration = max(1, round(seconds))
    out = subprocess.run(
        [binary, "-t1", f"-c{concurrency}", f"-d{duration}s", "--latency", _local(url)],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 30,
    ).stdout
    total = re.search(r"(\d+) requests in", out)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p50 = re.search(r"^\s*50%\s+(\S+)\s*$", out, re.MULTILINE)
    p99 = re.search(r"^\s*99%\s+(\S+)\s*$", out, re.MULTILINE)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    failed = int(bad.group(1)) if bad else 0
    failed += sum(int(g) for g in errors.groups()) if errors else 0
    return Run(
        what=what,
        tool="wrk",
        seconds=float(duration),
        requests=int(total.group(1)) if total else 0,
        failed=failed,
        req_per_s=float(rate.group(1)) if rate else 0.0,
        p50_ms=_wrk_ms(p50.group(1)) if p50 else None,
        p99_ms=_wrk_ms(p99.group(1)) if p99 else None,
    )
