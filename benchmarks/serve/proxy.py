"""The load balancer's added latency and its throughput, against replicas on 127.0.0.1.

What runs, each in its own process (so that the generator, the proxies and the replicas share
no GIL): two replicas (aiohttp, ``GET /`` → ``ok``): a *trivial* one, and a *working* one that
spends ``--work-ms`` of CPU per request on its event loop (1 ms: a small model's inference, one
request at a time, like the digits example's replica); a ``LoadBalancer`` in front of each
(``gpulease.serve.proxy`` as the server runs it: its own thread and event loop); and this script
as the load generator (benchmarks/serve/_load.py: bounded, seconds per phase, only 127.0.0.1).
In one run:

1. throughput, closed loop (``--concurrency`` connections sending as fast as answered): the
   trivial replica direct, the proxy in front of it (with ``wrk`` when on PATH, `apt-get install
   wrk`, and always with the Python generator too), and the working replica direct: its
   capacity;
2. latency at a fixed rate: ``--fraction`` (70 %) of the working replica's capacity as an
   open-loop schedule (request i leaves at t0 + i / rate whatever the answers), direct, then
   through the proxy; per request from its send to its full answer. The proxy's added p50 / p99
   is the difference of the two runs' percentiles. ``--work-ms 0`` makes the working replica
   trivial too (its capacity is then above what the proxy carries on 2 cores: see the README).

    python benchmarks/serve/proxy.py [--seconds 5] [--concurrency 32] [--fraction 0.7]
                                     [--work-ms 1] [--uvloop off|on|both] [--json F]

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
from dataclasses import asdict
from typing import Any

from _load import Run, closed, open_loop, wrk  # benchmarks/serve/_load.py

HOST = "127.0.0.1"


# --- the roles in child processes -----------------------------------------------------------


def _new_loop(uvloop: bool) -> asyncio.AbstractEventLoop:
    if uvloop:
        import uvloop as uv

        return uv.new_event_loop()
    return asyncio.new_event_loop()


def _replica(work_s: float, uvloop: bool) -> None:
    from aiohttp import web

    async def ok(request: web.BaseRequest) -> web.Response:
        if work_s > 0:
            end = time.perf_counter() + work_s
            while time.perf_counter() < end:  # CPU work on the loop: one request at a time
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


def _capacity(what: str, url: str, args: argparse.Namespace) -> Run:
    fast = wrk(what, url, args.concurrency, args.seconds)
    return fast or asyncio.run(closed(what, url, args.concurrency, args.seconds))


def measure(args: argparse.Namespace, uvloop: bool) -> dict[str, Any]:
    flag = ["--uvloop"] if uvloop else []
    with contextlib.ExitStack() as children:
        trivial = children.enter_context(_child("--role", "replica", *flag))
        working = children.enter_context(
            _child("--role", "replica", "--work-ms", str(args.work_ms), *flag)
        )
        proxy_trivial = children.enter_context(
            _child("--role", "proxy", "--backend", trivial, *flag)
        )
        proxy_working = children.enter_context(
            _child("--role", "proxy", "--backend", working, *flag)
        )
        asyncio.run(closed("warm-up", proxy_trivial, args.concurrency, 1.0))
        runs = [
            _capacity("trivial replica, direct", trivial, args),
            _capacity("proxy → trivial replica", proxy_trivial, args),
        ]
        if runs[-1].tool != "python":
            python = closed(
                "proxy → trivial replica", proxy_trivial, args.concurrency, args.seconds
            )
            runs.append(asyncio.run(python))
        capacity = _capacity(f"{args.work_ms:g} ms replica, direct", working, args)
        rate = max(1, round(capacity.req_per_s * args.fraction))
        asyncio.run(open_loop("warm-up", proxy_working, rate, 1.0))
        direct = asyncio.run(open_loop(f"direct @ {rate}/s", working, rate, args.seconds))
        proxied = asyncio.run(open_loop(f"proxy @ {rate}/s", proxy_working, rate, args.seconds))
    added = {
        key: None
        if getattr(proxied, key) is None or getattr(direct, key) is None
        else round(getattr(proxied, key) - getattr(direct, key), 3)
        for key in ("p50_ms", "p99_ms")
    }
    return {
        "uvloop": uvloop,
        "work_ms": args.work_ms,
        "rate": rate,
        "runs": [asdict(r) for r in (*runs, capacity, direct, proxied)],
        "proxy_req_per_s": max(r.req_per_s for r in runs[1:]),
        "added_p50_ms": added["p50_ms"],
        "added_p99_ms": added["p99_ms"],
    }


def _print(result: dict[str, Any]) -> None:
    print(f"\nuvloop: {result['uvloop']}  fixed rate: {result['rate']} req/s")
    print("| run | tool | s | requests | failed | req/s | p50 ms | p99 ms | lag p99 ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["runs"]:
        print(
            f"| {r['what']} | {r['tool']} | {r['seconds']} | {r['requests']} | {r['failed']} "
            f"| {r['req_per_s']} | {r['p50_ms']} | {r['p99_ms']} | {r['lag_p99_ms'] or ''} |"
        )
    print(f"added by the proxy: p50 {result['added_p50_ms']} ms, p99 {result['added_p99_ms']} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--role", choices=["bench", "replica", "proxy"], default="bench")
    parser.add_argument("--backend", default="")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--fraction", type=float, default=0.7)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument(
        "--uvloop", nargs="?", const="on", default="off", choices=["off", "on", "both"]
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.role == "replica":
        return _replica(args.work_ms / 1000, args.uvloop == "on")
    if args.role == "proxy":
        return _proxy(args.backend, args.uvloop == "on")
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.uvloop]
    results = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "args": {k: v for k, v in vars(args).items() if k not in {"role", "backend", "json"}},
        "results": [measure(args, mode) for mode in modes],
    }
    for result in results["results"]:
        _print(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
