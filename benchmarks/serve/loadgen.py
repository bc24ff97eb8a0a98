"""A bounded HTTP load generator for gpulease services, only against this machine.

It owns sending and recording: the open-loop run of a rate schedule (benchmarks/serve/schedule.py:
a constant rate, or piecewise-linear ramps such as ``10:200:60s``; request k is sent when it is
due, whether or not earlier answers came back), the closed-loop throughput probe, and the record
of every request: due → sent → answered (an HTTP status) or failed (no answer: connection refused
or reset, timeout). A run stops by itself at the schedule's end (closed loop: its duration) or
after ``requests`` requests, whichever comes first, and only ever talks to loopback (127.0.0.0/8,
::1, localhost); redirects are not followed.

Library: ``run_load(url, Schedule.constant(50, 10), body=...)`` (or ``run_load_async`` inside a
running loop) → :class:`LoadResult` (``summary()``, ``table()``, ``timeline()``; see
benchmarks/serve/stats.py); ``run_closed(url, concurrency, duration_s)`` is the closed-loop
throughput probe (each client sends its next request when the last is answered);
``run_slices({"direct": a, "proxied": b}, schedule, 6)`` runs the schedule against each URL in
turn, slice by slice, for a same-run comparison. Command line::

    python benchmarks/serve/loadgen.py http://127.0.0.1:8080/predict \\
        --body examples/serve-digits/request.json --ramp 10:200:30s,200:10:30s [--json out.json]

Exit 0 when every request got a 2xx answer, 1 when some did not, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script: make `benchmarks.serve` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve.schedule import (
    MAX_DURATION_S,
    Schedule,
    Segment,
    parse_duration_s,
    parse_ramp,
)
from benchmarks.serve.stats import LoadResult, RequestRecord

from gpulease.errors import UserInputError

MAX_REQUESTS = 10_000_000

__all__ = [
    "LoadResult",
    "Options",
    "RequestRecord",
    "Schedule",
    "Segment",
    "check_url",
    "parse_duration_s",
    "parse_ramp",
    "run_closed",
    "run_closed_async",
    "run_load",
    "run_load_async",
    "run_slices",
    "run_slices_async",
]


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


class Options(TypedDict, total=False):
    """What to send and the run's bounds (both run_load and run_closed)."""

    requests: int | None  # stop after this many requests
    method: str | None  # default POST with a body, else GET
    body: bytes | None
    headers: Mapping[str, str] | None
    timeout_s: float  # per request (default 30)
    max_in_flight: int  # open loop: requests in flight at most (default 1000)


class _Sender:
    """One run's session: sends a request, records its outcome against the run's start."""

    def __init__(self, url: str, options: Options) -> None:
        check_url(url)
        requests = options.get("requests")
        if requests is not None and not 0 < requests <= MAX_REQUESTS:
            raise UserInputError(f"requests: {requests}, expected 1..{MAX_REQUESTS}")
        self.url, self.requests = url, requests
        self.body = options.get("body")
        self.verb = options.get("method") or ("POST" if self.body is not None else "GET")
        self.headers = dict(options.get("headers") or {})
        if self.body is not None:
            self.headers.setdefault("Content-Type", "application/json")
        self.timeout_s = options.get("timeout_s", 30.0)
        self.max_in_flight = options.get("max_in_flight", 1000)
        if self.max_in_flight < 1:
            raise UserInputError("max_in_flight: at least 1")
        self.records: list[RequestRecord] = []
        self.loop = asyncio.get_running_loop()
        self.start = self.loop.time()

    def now(self) -> float:
        return self.loop.time() - self.start

    async def send(self, session: Any, due: float | None = None) -> None:
        """One request; ``due`` None (closed loop): due when sent."""
        import aiohttp

        sent = self.now()
        due = sent if due is None else due
        status, error = 0, None
        try:
            async with session.request(
                self.verb, self.url, data=self.body, headers=self.headers, allow_redirects=False
            ) as response:
                await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
        self.records.append(RequestRecord(due, sent, self.now() - sent, status, error))

    def session(self, connections: int) -> Any:
        import aiohttp

        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=connections),
            timeout=aiohttp.ClientTimeout(total=self.timeout_s),
        )

    def result(self, scheduled: float, elapsed: float | None = None) -> LoadResult:
        self.records.sort(key=lambda r: r.due_s)
        elapsed = self.now() if elapsed is None else elapsed
        return LoadResult(
            self.url, self.verb, tuple(self.records), elapsed, scheduled, self.requests
        )


async def _open(sender: _Sender, session: Any, schedule: Schedule, base_s: float = 0.0) -> None:
    """The schedule's requests, due ``base_s`` seconds into the sender's run (its clock goes on
    from there: slices of one run follow each other on it); returns when all are answered."""
    slots = asyncio.Semaphore(sender.max_in_flight)

    async def one(due: float) -> None:
        try:
            await sender.send(session, due)
        finally:
            slots.release()

    limit = None if sender.requests is None else sender.requests - len(sender.records)
    pending: set[asyncio.Task[None]] = set()
    sender.start = sender.loop.time() - base_s
    for arrival in schedule.arrivals(limit):
        due = base_s + arrival
        delay = due - sender.now()
        if delay > 0:
            await asyncio.sleep(delay)
        await slots.acquire()
        task = asyncio.create_task(one(due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.gather(*pending)


async def run_load_async(url: str, schedule: Schedule, **options: Unpack[Options]) -> LoadResult:
    """Send the schedule's requests to ``url`` (open loop) and record each one's outcome."""
    sender = _Sender(url, options)
    async with sender.session(sender.max_in_flight) as session:
        await _open(sender, session, schedule)
        return sender.result(schedule.expected_requests)


async def run_slices_async(
    urls: Mapping[str, str], schedule: Schedule, slices: int, **options: Unpack[Options]
) -> dict[str, LoadResult]:
    """The schedule ``slices`` times per URL, the URLs taking turns slice by slice (so that all
    of them see whatever else loads the machine meanwhile): a same-run comparison, e.g. direct
    against proxied. Each URL keeps its session (its keep-alive connections) across its slices;
    its result's clock counts only its own slices (each at least the schedule's duration)."""
    if not 0 < slices <= 1000:
        raise UserInputError(f"slices: {slices}, expected 1..1000")
    senders = {name: _Sender(url, options) for name, url in urls.items()}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {
            name: await stack.enter_async_context(sender.session(sender.max_in_flight))
            for name, sender in senders.items()
        }
        elapsed = dict.fromkeys(urls, 0.0)
        for _ in range(slices):
            for name, sender in senders.items():
                await _open(sender, sessions[name], schedule, elapsed[name])
                elapsed[name] = max(sender.now(), elapsed[name] + schedule.duration_s)
        return {
            name: sender.result(schedule.expected_requests * slices, elapsed[name])
            for name, sender in senders.items()
        }


async def run_closed_async(
    url: str, concurrency: int, duration_s: float, **options: Unpack[Options]
) -> LoadResult:
    """Closed loop: ``concurrency`` clients each send their next request as soon as the last one
    is answered, until ``duration_s`` has passed (or ``requests`` were sent): a throughput probe."""
    if not 0 < concurrency <= 10_000:
        raise UserInputError(f"concurrency: {concurrency}, expected 1..10000")
    if not (math.isfinite(duration_s) and 0 < duration_s <= MAX_DURATION_S):
        raise UserInputError(f"duration: {duration_s} s, expected 0..{MAX_DURATION_S:g}")
    sender = _Sender(url, options)
    budget = [sender.requests if sender.requests is not None else MAX_REQUESTS]

    async def client(session: Any) -> None:
        while sender.now() < duration_s and budget[0] > 0:
            budget[0] -= 1
            await sender.send(session)

    async with sender.session(concurrency) as session:
        sender.start = sender.loop.time()
        await asyncio.gather(*(client(session) for _ in range(concurrency)))
        return sender.result(float(len(sender.records)))


def run_load(url: str, schedule: Schedule, **options: Unpack[Options]) -> LoadResult:
    """:func:`run_load_async` in a fresh event loop (for synchronous callers)."""
    return asyncio.run(run_load_async(url, schedule, **options))


def run_closed(
    url: str, concurrency: int, duration_s: float, **options: Unpack[Options]
) -> LoadResult:
    """:func:`run_closed_async` in a fresh event loop (for synchronous callers)."""
    return asyncio.run(run_closed_async(url, concurrency, duration_s, **options))


def run_slices(
    urls: Mapping[str, str], schedule: Schedule, slices: int, **options: Unpack[Options]
) -> dict[str, LoadResult]:
    """:func:`run_slices_async` in a fresh event loop (for synchronous callers)."""
    return asyncio.run(run_slices_async(urls, schedule, slices, **options))


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("url", help="http://127.0.0.1:PORT/PATH (loopback only)")
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--rate", type=float, help="constant requests per second")
    shape.add_argument("--ramp", help="START:END:DURATION[,…] in req/s, as in 10:200:60s")
    shape.add_argument("--concurrency", type=int, help="closed loop: N clients back to back")
    parser.add_argument(
        "--duration", help="at --rate or --concurrency (default 10s); cuts a --ramp short"
    )
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
    if args.ramp is None:
        duration = parse_duration_s(args.duration or "10s", "--duration")
        return Schedule.constant(args.rate if args.rate is not None else 1.0, duration)
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


def _options(args: argparse.Namespace) -> Options:
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
    return Options(
        requests=args.requests,
        method=args.method,
        body=body,
        headers=headers,
        timeout_s=parse_duration_s(args.timeout, "--timeout"),
        max_in_flight=args.max_in_flight,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        schedule = _schedule(args)
        check_url(args.url)
        options = _options(args)
        started = time.time()
        if args.concurrency is not None:
            result = run_closed(args.url, args.concurrency, schedule.duration_s, **options)
        else:
            result = run_load(args.url, schedule, **options)
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
