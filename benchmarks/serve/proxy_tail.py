"""Where the proxy's p99 at 70 % of a serial replica comes from: one bounded replica (one request
at a time, held ``--work-ms`` asleep, as benchmarks/serve/proxy.py's), direct and through
``LoadBalancer`` proxies, open loop at 70 % of the replica's capacity, the targets taking turns in
slices (benchmarks/serve/loadgen.py ``run_slices``), everything on 127.0.0.1, each part in its
own process. Measured per target, besides the client's p50 / p99:

- at the replica: the wait for its one slot (the queue a burst builds), the service time, the
  share of requests arriving < 100 µs after the previous one (bursts), connections used;
- in each proxy process: its event loop's lag (a 5 ms ticker's lateness) and its GC pauses;
- at the generator: its lag behind its schedule, and the client p99 of the requests it sent on
  time (lag < 1 ms), so that the generator's own stalls are told apart from the proxy's.
- per process (generator, replica, proxies), over the slices: CPU seconds and involuntary
  context switches (the scheduler taking the CPU away), from /proc.

Proxies: ``proxy`` (as the server runs it) and ``proxy-gc-frozen`` (``gc.freeze()`` then
``gc.disable()`` in its process: what the GC costs). The replica's capacity is measured first
(closed loop, its service time at the replica), the rate is ``--fraction`` of it.
Slices are 1 s by default: a proxy idle as long as the balancer's keep-alive (4 s) between its
slices would reopen every replica connection at each slice's start.

    python benchmarks/serve/proxy_tail.py [--seconds 12] [--slices 12] [--work-ms 1]
        [--fraction 0.7] [--rate N] [--proxies proxy,proxy-gc-frozen] [--replica-nice -5]
        [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks.serve` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.serve.loadgen import LoadResult, Schedule, run_closed, run_load, run_slices
from benchmarks.serve.stats import percentile

HOST = "127.0.0.1"


def _q(values: list[float], *qs: float) -> list[float | None]:
    ordered = sorted(values)
    return [None if not ordered else round(1000 * (percentile(ordered, q) or 0.0), 3) for q in qs]


# --- the roles in child processes -----------------------------------------------------------


def _usage(pid: int | str = "self") -> tuple[float, int]:
    """A process's CPU seconds (all its threads) and how often the scheduler took the CPU from
    it (involuntary context switches), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("nonvoluntary_ctxt_switches:"):
                switches += int(line.split()[1])
    return cpu_s, switches


class _Tally:
    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.waits: list[float] = []
        self.service: list[float] = []
        self.connections: set[int] = set()

    def summary(self) -> dict[str, Any]:
        gaps = [b - a for a, b in zip(self.arrivals, self.arrivals[1:], strict=False)]
        wait = _q(self.waits, 50, 99)
        service = _q(self.service, 50, 99)
        return {
            "requests": len(self.waits),
            "wait_p50_ms": wait[0],
            "wait_p99_ms": wait[1],
            "service_p50_ms": service[0],
            "service_p99_ms": service[1],
            "service_mean_ms": round(1000 * sum(self.service) / max(1, len(self.service)), 3),
            "burst_share": round(sum(g < 1e-4 for g in gaps) / max(1, len(gaps)), 4),
            "connections": len(self.connections),
        }


def _replica(work_s: float, nice: int) -> None:
    """``GET /NAME`` → ``ok`` after holding the one slot ``work_s`` asleep; tallies per NAME;
    ``GET /_stats`` → the tallies (and starts new ones). ``nice`` < 0 (root only): ahead of the
    machine's other processes, as if on a node of its own."""
    from aiohttp import web

    if nice:
        os.nice(nice)

    lock = asyncio.Lock()
    tallies: dict[str, _Tally] = {}

    async def handle(request: web.BaseRequest) -> web.Response:
        if request.path == "/_stats":
            body = {name: tally.summary() for name, tally in tallies.items()}
            tallies.clear()
            return web.json_response(body)
        tally = tallies.setdefault(request.path.strip("/"), _Tally())
        arrived = time.perf_counter()
        tally.arrivals.append(arrived)
        tally.connections.add(id(request.transport))
        async with lock:
            got = time.perf_counter()
            await asyncio.sleep(work_s)
            tally.service.append(time.perf_counter() - got)
        tally.waits.append(got - arrived)
        return web.Response(text="ok")

    async def serve() -> None:
        runner = web.ServerRunner(web.Server(handle, access_log=None))
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        print(json.dumps({"port": runner.addresses[0][1]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(serve())


def _proxy(backend: str, frozen: bool) -> None:
    """A LoadBalancer in front of ``backend``; at the end (stdin closed) prints its loop's lag
    and its GC pauses."""
    from gpulease.serve.proxy import Backend, LoadBalancer

    lb = LoadBalancer(HOST, 0)
    port = lb.start()
    lb.set_backends([Backend(1, backend)])
    pauses: list[float] = []
    cpu: list[float] = []  # the same pauses in the thread's CPU time: the GC's own work
    full = [0]
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter(), time.thread_time()]
        elif started:
            pauses.append(time.perf_counter() - started[0])
            cpu.append(time.thread_time() - started[1])
            full[0] += info["generation"] == 2

    gc.callbacks.append(on_gc)
    if frozen:
        gc.freeze()
        gc.disable()
    lags: list[float] = []

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + 0.005
            await asyncio.sleep(0.005)
            lags.append(loop.time() - due)

    assert lb._loop is not None  # the balancer's own loop: the ticker shares it with requests
    ticking = asyncio.run_coroutine_threadsafe(ticker(), lb._loop)
    print(json.dumps({"port": port}), flush=True)
    sys.stdin.read()
    ticking.cancel()
    lb.stop()
    lag = _q(lags, 50, 99, 100)
    pause = _q(pauses, 99, 100)
    print(json.dumps({"loop_lag_p50_ms": lag[0], "loop_lag_p99_ms": lag[1],
                      "loop_lag_max_ms": lag[2], "gc_pauses": len(pauses), "gc_full": full[0],
                      "gc_pause_p99_ms": pause[0], "gc_pause_max_ms": pause[1],
                      "gc_pause_cpu_max_ms": _q(cpu, 100)[0],
                      "gc_pause_total_ms": round(1000 * sum(pauses), 3)}), flush=True)  # fmt: skip


class _Child:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child {args} did not start")
        self.url = f"http://{HOST}:{json.loads(line)['port']}"
        self.report: dict[str, Any] = {}

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        self.report = json.loads(line) if line.strip() else {}
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def _children() -> Iterator[list[_Child]]:
    made: list[_Child] = []
    try:
        yield made
    finally:
        for child in made:
            child.stop()


# --- the run ---------------------------------------------------------------------------------


def _replica_stats(replica: _Child) -> dict[str, Any]:
    import urllib.request

    with urllib.request.urlopen(f"{replica.url}/_stats", timeout=10) as answer:
        stats: dict[str, Any] = json.load(answer)
    return stats


def _client(result: LoadResult) -> dict[str, Any]:
    s = result.summary()
    on_time = sorted(r.latency_s for r in result.records if r.ok and r.sent_s - r.due_s < 1e-3)
    return {
        "requests": s["requests"],
        "failed": s["failed"],
        "p50_ms": s["latency_ms"]["p50"],
        "p99_ms": s["latency_ms"]["p99"],
        "lag_p99_ms": s["lag_p99_ms"],
        "on_time_share": round(len(on_time) / max(1, s["ok"]), 3),
        "on_time_p99_ms": _q(on_time, 99)[0],
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    work = str(args.work_ms / 1000)
    with _children() as children:
        replica = _Child("--role", "replica", "--work-s", work, "--nice", str(args.replica_nice))
        children.append(replica)
        variants = {"proxy": (), "proxy-gc-frozen": ("--frozen",)}
        proxies = {
            name: _Child("--role", "proxy", "--backend", replica.url, *variants[name])
            for name in args.proxies.split(",")
        }
        children.extend(proxies.values())
        run_closed(f"{replica.url}/capacity", 32, 2.0)
        calibration = _replica_stats(replica)["capacity"]
        capacity = 1000 / calibration["service_mean_ms"]
        rate = args.rate or round(capacity * args.fraction)
        urls = {"direct": f"{replica.url}/direct"}
        urls |= {name: f"{child.url}/{name}" for name, child in proxies.items()}
        for url in urls.values():  # warm-up: connections open, code paths hot
            run_load(url, Schedule.constant(rate, 0.5))
        _replica_stats(replica)
        schedule = Schedule.constant(rate, args.seconds / args.slices)
        pids: dict[str, int | str] = {"generator": "self", "replica": replica.proc.pid}
        pids |= {name: child.proc.pid for name, child in proxies.items()}
        before = {name: _usage(pid) for name, pid in pids.items()}
        results = run_slices(urls, schedule, args.slices, max_in_flight=256)
        after = {name: _usage(pid) for name, pid in pids.items()}
        at_replica = _replica_stats(replica)
    processes = {
        name: {"cpu_s": round(after[name][0] - before[name][0], 2),
               "preempted": after[name][1] - before[name][1]}
        for name in pids
    }  # fmt: skip
    targets = {}
    for name, result in results.items():
        targets[name] = {"client": _client(result), "replica": at_replica.get(name, {})}
        if name in proxies:
            targets[name]["proxy_process"] = proxies[name].report
    direct = targets["direct"]["client"]
    for name in proxies:
        client = targets[name]["client"]
        for key in ("p50_ms", "p99_ms", "on_time_p99_ms"):
            if client[key] is not None and direct[key] is not None:
                client[f"added_{key}"] = round(client[key] - direct[key], 3)
    return {"capacity_req_per_s": round(capacity, 1), "calibration": calibration,
            "rate": rate, "targets": targets, "processes": processes}  # fmt: skip


def _print(result: dict[str, Any]) -> None:
    print(f"replica capacity {result['capacity_req_per_s']} req/s (1 / its mean service time); "
          f"rate {result['rate']} req/s")  # fmt: skip
    print("| target | p50 ms | p99 ms | added p50 | added p99 | gen lag p99 | on-time p99 "
          "| replica wait p50 / p99 | service p99 | bursts | conns | proxy loop lag p99 / max "
          "| GC pauses (max) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, t in result["targets"].items():
        c, r, p = t["client"], t["replica"], t.get("proxy_process", {})
        print(f"| {name} | {c['p50_ms']} | {c['p99_ms']} | {c.get('added_p50_ms', '')} "
              f"| {c.get('added_p99_ms', '')} | {c['lag_p99_ms']} | {c['on_time_p99_ms']} "
              f"| {r.get('wait_p50_ms')} / {r.get('wait_p99_ms')} | {r.get('service_p99_ms')} "
              f"| {r.get('burst_share')} | {r.get('connections')} "
              f"| {p.get('loop_lag_p99_ms', '')} / {p.get('loop_lag_max_ms', '')} "
              f"| {p.get('gc_pauses', '')} ({p.get('gc_pause_max_ms', '')}) |")  # fmt: skip
    print(
        "during the slices (CPU s, preempted ×):",
        ", ".join(
            f"{name} {u['cpu_s']} s ×{u['preempted']}" for name, u in result["processes"].items()
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--role", choices=["bench", "replica", "proxy"], default="bench")
    parser.add_argument("--backend", default="")
    parser.add_argument("--work-s", type=float, default=0.001, help=argparse.SUPPRESS)
    parser.add_argument("--frozen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nice", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--replica-nice", type=int, default=0, help="e.g. -5 (root): the "
                        "replica ahead of the rest, as on its own node")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--slices", type=int, default=12)
    parser.add_argument("--work-ms", type=float, default=1.0)
    parser.add_argument("--fraction", type=float, default=0.7)
    parser.add_argument("--rate", type=int, default=0, help="req/s (default: the fraction)")
    parser.add_argument("--proxies", default="proxy,proxy-gc-frozen", help="which, in turn")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    if args.role == "replica":
        return _replica(args.work_s, args.nice)
    if args.role == "proxy":
        return _proxy(args.backend, args.frozen)
    started = time.time()
    result = measure(args)
    result = {"started_at": started, "load_average": os.getloadavg(),
              "args": {k: v for k, v in vars(args).items() if k in {"seconds", "slices",
                       "work_ms", "fraction", "rate", "proxies", "replica_nice"}},
              **result}  # fmt: skip
    _print(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
