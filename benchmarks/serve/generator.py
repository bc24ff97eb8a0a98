"""How fast the load generator itself goes: loadgen.py against a trivial aiohttp server (its own
process, one core) at rising rates, so the serving benchmarks know which rates it can drive.

    python benchmarks/serve/generator.py [--rates 500,1000,2000,3000,4000] [--seconds 3]

A step kept up when the achieved rate is ≥ 95 % of the schedule and the generator's lag behind
its schedule stayed under 50 ms; the closed-loop rows (``--concurrency``) are the most it sends
back to back. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.serve.loadgen import Schedule, run_closed, run_load  # noqa: E402

SERVER = """
import sys
from aiohttp import web
async def ok(request):
    await request.read()
    return web.Response(body=b'{"ok":true}', content_type="application/json")
app = web.Application()
app.router.add_route("*", "/{tail:.*}", ok)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rates", default="500,1000,2000,3000,4000")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="8,32", help="closed-loop rows")
    args = parser.parse_args(argv)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        print("| target req/s | achieved req/s | failed | p50 ms | p99 ms | max lag ms | kept up |")
        print("|---:|---:|---:|---:|---:|---:|---|")
        for rate in (float(r) for r in args.rates.split(",")):
            result = run_load(url, Schedule.constant(rate, args.seconds), body=b"{}")
            s = result.summary()
            kept = result.achieved_rps >= 0.95 * rate and result.max_lag_s < 0.05
            print(
                f"| {rate:g} | {s['achieved_rps']:g} | {s['failed']} | {s['latency_ms']['p50']} "
                f"| {s['latency_ms']['p99']} | {s['max_lag_ms']} | {'yes' if kept else 'no'} |"
            )
        for clients in (int(c) for c in args.concurrency.split(",")):
            result = run_closed(url, clients, args.seconds, body=b"{}")
            s = result.summary()
            print(
                f"| closed loop, {clients} clients | {s['achieved_rps']:g} | {s['failed']} "
                f"| {s['latency_ms']['p50']} | {s['latency_ms']['p99']} | – | – |"
            )
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
