"""A bounded HTTP load generator for gpulease services, only against this machine.

It owns the rate schedule (a constant rate, or piecewise-linear ramps such as ``10:200:60s``), the
open-loop arrivals it implies (request k is due when the integral of the rate reaches k, whether
or not earlier answers came back), and the record of every request: due → sent → answered (an
HTTP status) or failed (no answer: connection refused or reset, timeout). A run stops by itself at
the schedule's end or after ``requests`` requests, whichever comes first, and only ever talks to
loopback (127.0.0.0/8, ::1, localhost); redirects are not followed.

Library: ``run_load(url, Schedule.constant(50, 10), body=...)`` (or ``run_load_async`` inside a
running loop) → :class:`LoadResult` (``summary()``, ``table()``, ``timeline()``; see
benchmarks/serve/stats.py). Command line::

    python benchmarks/serve/loadgen.py http://127.0.0.1:8080/predict \\
        --body examples/serve-digits/request.json --ramp 10:200:30s,200:10:30s [--json out.json]

Exit 0 when every request got a 2xx answer, 1 when some did not, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import math
import re
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `benchmarks.serve` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve.stats import LoadResult, RequestRecord

from gpulease.errors import UserInputError

MAX_DURATION_S = 3600.0
MAX_RATE = 100_000.0
MAX_REQUESTS = 10_000_000
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}

__all__ = [
    "LoadResult",
    "RequestRecord",
    "Schedule",
    "Segment",
    "check_url",
    "parse_duration_s",
    "parse_ramp",
    "run_load",
    "run_load_async",
]


def parse_duration_s(text: str, what: str = "duration") -> float:
    """``60s``, ``1.5m``, ``250ms``, ``2h``; a plain number is seconds."""
    match = _DURATION.match(text)
    if not match:
        raise UserInputError(f"{what}: expected a duration such as 30s, 2m or 250ms, got {text!r}")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True)
class Segment:
    """The rate goes linearly from ``start_rps`` to ``end_rps`` over ``duration_s``."""

    start_rps: float
    end_rps: float
    duration_s: float

    def count(self, t: float) -> float:
        """Requests due in this segment by ``t`` seconds into it (the rate's integral)."""
        slope = (self.end_rps - self.start_rps) / self.duration_s
        return self.start_rps * t + slope * t * t / 2

    def time_of(self, m: float) -> float | None:
        """When the count reaches ``m`` (≥ 0), or None if not before the segment's end."""
        if m <= 0:
            return 0.0 if self.start_rps > 0 or self.end_rps > 0 else None
        a = (self.end_rps - self.start_rps) / (2 * self.duration_s)
        b = self.start_rps
        disc = b * b + 4 * a * m
        if disc < 0 or b + math.sqrt(disc) <= 0:
            return None
        t = 2 * m / (b + math.sqrt(disc))  # the stable root of a t² + b t − m = 0
        return t if t < self.duration_s else None


@dataclass(frozen=True)
class Schedule:
    """Segments one after another; request k (0, 1, …) is due when the count reaches k."""

    segments: tuple[Segment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise UserInputError("schedule: at least one segment")
        for seg in self.segments:
            for rate in (seg.start_rps, seg.end_rps):
                if not (math.isfinite(rate) and 0 <= rate <= MAX_RATE):
                    raise UserInputError(f"rate: {rate} req/s, expected 0..{MAX_RATE:g}")
            if not (math.isfinite(seg.duration_s) and seg.duration_s > 0):
                raise UserInputError(f"duration: {seg.duration_s} s, expected > 0")
        if self.duration_s > MAX_DURATION_S:
            raise UserInputError(f"duration: {self.duration_s:g} s, at most {MAX_DURATION_S:g}")

    @classmethod
    def constant(cls, rps: float, duration_s: float) -> Schedule:
        return cls((Segment(rps, rps, duration_s),))

    @property
    def duration_s(self) -> float:
        return sum(seg.duration_s for seg in self.segments)

    @property
    def expected_requests(self) -> float:
        return sum(seg.count(seg.duration_s) for seg in self.segments)

    def rate_at(self, t: float) -> float:
        for seg in self.segments:
            if t <= seg.duration_s:
                return seg.start_rps + (seg.end_rps - seg.start_rps) * t / seg.duration_s
            t -= seg.duration_s
        return 0.0

    def arrivals(self, limit: int | None = None) -> Iterator[float]:
        """Due times in seconds from the start, in order; at most ``limit`` of them."""
        k, offset, base = 0, 0.0, 0.0
        for seg in self.segments:
            while limit is None or k < limit:
                t = seg.time_of(k - base)
                if t is None:
                    break
                yield offset + t
                k += 1
            base += seg.count(seg.duration_s)
            offset += seg.duration_s


def parse_ramp(text: str) -> Schedule:
    """``10:200:60s`` (10 → 200 req/s over 60 s), several joined by commas."""
    segments = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) != 3:
            raise UserInputError(f"--ramp: {part!r} is not START:END:DURATION (as in 10:200:60s)")
        try:
            start, end = float(fields[0]), float(fields[1])
        except ValueError:
            raise UserInputError(f"--ramp: {part!r}: the rates must be numbers (req/s)") from None
        segments.append(Segment(start, end, parse_duration_s(fields[2], "--ramp")))
    return Schedule(tuple(segments))


def check_url(url: str) -> str:
    """The URL if it points at this machine (loopback); UserInputError otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserInputError(f"url: {url!r} is not an http:// URL")
    host = parts.hostname
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise UserInputError(
            f"url: {host} is not this machine; the load generator only sends to "
            "127.0.0.1 (127.0.0.0/8), ::1 or localhost"
        )
    return url


async def run_load_async(
    url: str,
    schedule: Schedule,
    *,
    requests: int | None = None,
    method: str | None = None,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    max_in_flight: int = 1000,
) -> LoadResult:
    """Send the schedule's requests to ``url`` (open loop) and record each one's outcome."""
    import aiohttp

    check_url(url)
    if requests is not None and not 0 < requests <= MAX_REQUESTS:
        raise UserInputError(f"requests: {requests}, expected 1..{MAX_REQUESTS}")
    verb = method or ("POST" if body is not None else "GET")
    sent_headers = dict(headers or {})
    if body is not None:
        sent_headers.setdefault("Content-Type", "application/json")
    loop = asyncio.get_running_loop()
    records: list[RequestRecord] = []
    slots = asyncio.Semaphore(max_in_flight)
    connector = aiohttp.TCPConnector(limit=max_in_flight, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = loop.time()

        async def one(due: float) -> None:
            sent = loop.time() - start
            status, error = 0, None
            try:
                async with session.request(
                    verb, url, data=body, headers=sent_headers, allow_redirects=False
                ) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc}"[:200]
            finally:
                slots.release()
            records.append(RequestRecord(due, sent, loop.time() - start - sent, status, error))

        pending: set[asyncio.Task[None]] = set()
        for due in schedule.arrivals(requests):
            delay = start + due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await slots.acquire()
            task = asyncio.create_task(one(due))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)
        elapsed = loop.time() - start
    records.sort(key=lambda r: r.due_s)
    return LoadResult(url, verb, tuple(records), elapsed, schedule.expected_requests, requests)


def run_load(url: str, schedule: Schedule, **options: object) -> LoadResult:
    """:func:`run_load_async` in a fresh event loop (for synchronous callers)."""
    return asyncio.run(run_load_async(url, schedule, **options))  # type: ignore[arg-type]


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url", help="http://127.0.0.1:PORT/PATH (loopback only)")
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--rate", type=float, help="constant requests per second")
    shape.add_argument("--ramp", help="START:END:DURATION[,…] in req/s, as in 10:200:60s")
    parser.add_argument("--duration", help="how long at --rate (default 10s); cuts a --ramp short")
    parser.add_argument("--requests", type=int, help="stop after this many requests")
    parser.add_argument("--body", type=Path, help="a file to send as the body (POST by default)")
    parser.add_argument("--method", help="HTTP method (default POST with --body, else GET)")
    parser.add_argument("--header", action="append", default=[], help="NAME:VALUE, repeatable")
    parser.add_argument("--timeout", default="30s", help="per request (default 30s)")
    parser.add_argument("--max-in-flight", type=int, default=1000)
    parser.add_argument("--json", type=Path, help="write the summary and timeline here")
    parser.add_argument("--records", action="store_true", help="with --json: every request too")
    return parser.parse_args(argv)


def _schedule(args: argparse.Namespace) -> Schedule:
    if args.rate is not None:
        duration = parse_duration_s(args.duration or "10s", "--duration")
        return Schedule.constant(args.rate, duration)
    schedule = parse_ramp(args.ramp)
    if args.duration:
        keep, cut = [], parse_duration_s(args.duration, "--duration")
        for seg in schedule.segments:
            if cut <= 0:
                break
            if seg.duration_s > cut:
                end = seg.start_rps + (seg.end_rps - seg.start_rps) * cut / seg.duration_s
                keep.append(Segment(seg.start_rps, end, cut))
            else:
                keep.append(seg)
            cut -= seg.duration_s
        schedule = Schedule(tuple(keep))
    return schedule


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        schedule = _schedule(args)
        check_url(args.url)
        headers = {}
        for item in args.header:
            name, sep, value = item.partition(":")
            if not sep or not name.strip():
                raise UserInputError(f"--header: {item!r} is not NAME:VALUE")
            headers[name.strip()] = value.strip()
        try:
            body = args.body.read_bytes() if args.body else None
        except OSError as exc:
            raise UserInputError(f"--body: cannot read {args.body}: {exc.strerror}") from None
        if args.max_in_flight < 1:
            raise UserInputError("--max-in-flight: at least 1")
        started = time.time()
        result = run_load(
            args.url, schedule, requests=args.requests, method=args.method, body=body,
            headers=headers, timeout_s=parse_duration_s(args.timeout, "--timeout"),
            max_in_flight=args.max_in_flight,
        )  # fmt: skip
    except UserInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.table())
    if args.json:
        data = {"started_at": started, **result.summary(), "timeline": result.timeline()}
        if args.records:
            data["records"] = [record.as_dict() for record in result.records]
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    return 0 if result.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
