"""The load balancer's added latency and its throughput, against replicas on 127.0.0.1.

What runs, each in its own process (the generator, the proxies and the replicas share no GIL):
two replicas (aiohttp, ``GET /`` → ``ok``): a *trivial* one, and a *bounded* one that serves one
request at a time and holds it ``--work-ms`` (1 ms; ``--work-kind sleep``: an accelerator's work,
the host's CPU idle, as on a GPU node; ``cpu``: spinning on the CPU this machine's 2 cores share
with the proxy and the generator); a ``LoadBalancer`` in front of each (``gpulease.serve.proxy``
as the server runs it: its own thread and event loop; ``--uvloop``: on uvloop's loop); and this
script as the load generator (benchmarks/serve/loadgen.py: bounded, seconds per phase, only
127.0.0.1; benchmarks/serve/wrk.py for wrk). In one run:

1. throughput, closed loop (``--concurrency`` connections sending as fast as answered; ``wrk``
   when on PATH — ``apt-get install wrk`` — and the Python generator too): the trivial replica
   direct, the proxy in front of it, and the bounded replica direct (its capacity);
2. latency at a fixed rate, open loop (request i leaves at t0 + i / rate whatever the answers;
   direct and proxied take turns in ``--slices`` slices, so both see the same background load),
   per request from its send to its full answer, the proxy's added p50 / p99 being the
   difference of the two sides' percentiles: the bounded replica at ``--fraction`` (70 %) of its
   capacity, and the trivial replica at ``--trivial-rate`` (1,000 req/s, the throughput target:
   70 % of the trivial replica's own capacity is several times what one Python proxy carries on
   2 cores, and more than the Python generator can send).

    python benchmarks/serve/proxy.py [--seconds 5] [--slices 5] [--concurrency 32]
        [--fraction 0.7] [--work-ms 1] [--work-kind sleep|cpu] [--trivial-rate 1000]
        [--uvloop off|on|both] [--json F]

Targets (issue 17): added p50 < 2 ms, p99 < 10 ms; ≥ 1,000 req/s through the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks.serve` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve.loadgen import LoadResult, Schedule, run_closed, run_load, run_slices
from benchmarks.serve.wrk import WrkResult, wrk_run

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Run:
    """One row of the benchmark's table."""

    what: str
    tool: str
    seconds: float
    requests: int
    failed: int
    req_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    lag_p99_ms: float | None = None

    @classmethod
    def of(cls, what: str, result: LoadResult, *, lag: bool = False) -> Run:
        """A loadgen run's row (``lag``: with the generator's p99 lag behind its schedule)."""
        s = result.summary()
        return cls(
            what, "python", round(result.elapsed_s, 3), s["requests"], s["failed"],
            round(result.ok / result.elapsed_s, 1), s["latency_ms"]["p50"],
            s["latency_ms"]["p99"], s["lag_p99_ms"] if lag else None,
        )  # fmt: skip

    @classmethod
    def of_wrk(cls, what: str, result: WrkResult) -> Run:
        return cls(what, "wrk", result.seconds, result.requests, result.failed,
                   result.req_per_s, result.p50_ms, result.p99_ms)  # fmt: skip


# --- the roles in child processes -----------------------------------------------------------


def _new_loop(uvloop: bool) -> asyncio.AbstractEventLoop:
    if uvloop:
        import uvloop as uv

        loop: asyncio.AbstractEventLoop = uv.new_event_loop()
        return loop
    return asyncio.new_event_loop()


def _replica(work_s: float, kind: str, uvloop: bool) -> None:
    """``GET /`` → ``ok``; with ``work_s``, one request at a time holds the replica that long:
    asleep (``kind`` "sleep": an accelerator's work, the host's CPU idle) or spinning ("cpu")."""
    from aiohttp import web

    lock = asyncio.Lock()

    async def ok(request: web.BaseRequest) -> web.Response:
        if work_s > 0 and kind == "sleep":
            async with lock:
                await asyncio.sleep(work_s)
        elif work_s > 0:
            end = time.perf_counter() + work_s
            while time.perf_counter() < end:  # blocks the loop: one request at a time
                pass
        return web.Response(text="ok")

    async def serve() -> None:
        runner = web.ServerRunner(web.Server(ok, access_log=None))
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        print(json.dumps({"port": runner.addresses[0][1]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    _new_loop(uvloop).run_until_complete(serve())


def _proxy(backend: str, uvloop: bool) -> None:
    from gpulease.serve.proxy import Backend, LoadBalancer

    lb = LoadBalancer(HOST, 0, loop_factory=(lambda: _new_loop(True)) if uvloop else None)
    port = lb.start()
    lb.set_backends([Backend(1, backend)])
    print(json.dumps({"port": port}), flush=True)
    sys.stdin.read()
    lb.stop()


@contextlib.contextmanager
def _child(*args: str) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child {args} did not start")
        yield f"http://{HOST}:{json.loads(line)['port']}/"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the run ---------------------------------------------------------------------------------


def _closed(what: str, url: str, args: argparse.Namespace, seconds: float | None = None) -> Run:
    return Run.of(what, run_closed(url, args.concurrency, seconds or args.seconds))


def _capacity(what: str, url: str, args: argparse.Namespace) -> Run:
    fast = wrk_run(url, args.concurrency, args.seconds)
    return Run.of_wrk(what, fast) if fast is not None else _closed(what, url, args)


def _fixed(
    what: str, direct: str, proxy: str, rate: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Direct and through the proxy at ``rate``, taking turns; the proxy's added p50 / p99."""
    run_load(proxy, Schedule.constant(rate, 1.0))  # warm-up
    names = (f"{what}, direct @ {rate}/s", f"{what}, proxy @ {rate}/s")
    urls = dict(zip(names, (direct, proxy), strict=True))
    per_slice = Schedule.constant(rate, args.seconds / args.slices)
    results = run_slices(urls, per_slice, args.slices, max_in_flight=256)
    plain, proxied = (Run.of(name, results[name], lag=True) for name in names)
    added = {
        key: None
        if getattr(proxied, key) is None or getattr(plain, key) is None
        else round(getattr(proxied, key) - getattr(plain, key), 3)
        for key in ("p50_ms", "p99_ms")
    }
    return {
        "what": what,
        "rate": rate,
        "runs": [plain, proxied],
        "added_p50_ms": added["p50_ms"],
        "added_p99_ms": added["p99_ms"],
    }


def measure(args: argparse.Namespace, uvloop: bool) -> dict[str, Any]:
    flag = ["--uvloop"] if uvloop else []
    work = ["--work-ms", str(args.work_ms), "--work-kind", args.work_kind]
    working_name = f"{args.work_ms:g} ms {args.work_kind} replica"
    with contextlib.ExitStack() as children:

        def child(*argv: str) -> str:
            return children.enter_context(_child(*argv))

        trivial = child("--role", "replica", "--work-ms", "0")
        working = child("--role", "replica", *work)
        proxy_trivial = child("--role", "proxy", "--backend", trivial, *flag)
        proxy_working = child("--role", "proxy", "--backend", working, *flag)
        _closed("warm-up", proxy_trivial, args, 1.0)
        runs = [
            _capacity("trivial replica, direct", trivial, args),
            _capacity("proxy → trivial replica", proxy_trivial, args),
        ]
        if runs[-1].tool != "python":
            runs.append(_closed("proxy → trivial replica", proxy_trivial, args))
        runs.append(_capacity(f"{working_name}, direct", working, args))
        rate = max(1, round(runs[-1].req_per_s * args.fraction))
        fixed = [
            _fixed(working_name, working, proxy_working, rate, args),
            _fixed("trivial replica", trivial, proxy_trivial, args.trivial_rate, args),
        ]
    return {
        "uvloop": uvloop,
        "throughput": [asdict(r) for r in runs],
        "proxy_req_per_s": max(r.req_per_s for r in runs[1:-1]),
        "fixed_rate": [{**f, "runs": [asdict(r) for r in f["runs"]]} for f in fixed],
    }


def _print(result: dict[str, Any]) -> None:
    print(f"\nuvloop: {result['uvloop']}")
    print("| run | tool | s | requests | failed | req/s | p50 ms | p99 ms | lag p99 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    runs = result["throughput"] + [r for f in result["fixed_rate"] for r in f["runs"]]
    for r in runs:
        print(
            f"| {r['what']} | {r['tool']} | {r['seconds']} | {r['requests']} | {r['failed']} "
            f"| {r['req_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['lag_p99_ms'] or ''} |"
        )
    for f in result["fixed_rate"]:
        print(
            f"{f['what']} @ {f['rate']}/s: the proxy adds p50 {f['added_p50_ms']} ms, "
            f"p99 {f['added_p99_ms']} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--role", choices=["bench", "replica", "proxy"], default="bench")
    parser.add_argument("--backend", default="")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.7)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--work-kind", choices=["sleep", "cpu"], default="sleep")
    parser.add_argument("--trivial-rate", type=int, default=1000)
    parser.add_argument("--slices", type=int, default=5)
    parser.add_argument(
        "--uvloop", nargs="?", const="on", default="off", choices=["off", "on", "both"]
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.role == "replica":
        return _replica(args.work_ms / 1000, args.work_kind, args.uvloop == "on")
    if args.role == "proxy":
        return _proxy(args.backend, args.uvloop == "on")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.uvloop]
    runs = [measure(args, mode) for mode in modes]
    results: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "args": {k: v for k, v in vars(args).items() if k not in {"role", "backend", "json"}},
        "results": runs,
    }
    for result in runs:
        _print(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
