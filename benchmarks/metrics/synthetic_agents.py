"""Many synthetic node agents behind one loopback HTTP server, for the ``/metrics`` benchmark.

Node ``R`` answers ``GET /n/R/v1/metrics?since=T`` like a real agent's ``/v1/metrics``
(``{"samples": [...]}``, oldest first, only samples taken after ``T``): its samples are the
RECORDED sample of a real agent (``--sample FILE``: one Sample JSON with 8 fake GPUs and the
real host sampler's node figures), re-stamped every ``--interval`` seconds of wall-clock time
(the real agent's default: 5 s) with per-node, per-GPU utilisation and memory that move from
sample to sample. At most ``--capacity`` samples are kept, like the agent's ring; the ring
starts ``--warm`` samples before the process (default 0: agents started with the benchmark).
No token is checked (these are not agents; the server's client still sends one).

    python benchmarks/metrics/synthetic_agents.py --sample FILE --port-file FILE [--interval 5]

It writes its port to ``--port-file`` once it listens, and serves until killed.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

_PATH = re.compile(r"^/n/(\d+)/v1/metrics$")


class Nodes:
    def __init__(
        self, template: dict[str, Any], interval_s: float, capacity: int, warm: int
    ) -> None:
        self.template = template
        self.interval_s = interval_s
        self.capacity = capacity
        # the agents "started" ``warm`` samples before this process did
        self.first_tick = int(time.time() // interval_s) - warm

    def sample(self, rank: int, tick: int) -> dict[str, Any]:
        sample = copy.deepcopy(self.template)
        sample["at"] = tick * self.interval_s + (rank % 1000) * 1e-4
        for gpu in sample.get("gpus") or []:
            phase = 0.3 * rank + 0.7 * int(gpu.get("index", 0)) + 0.5 * tick
            gpu["utilization_pct"] = round(50.0 + 45.0 * math.sin(phase), 2)
            total = float(gpu.get("memory_total_mb") or 80_000.0)
            gpu["memory_used_mb"] = round(total * (0.5 + 0.3 * math.cos(phase)), 1)
        return sample

    def answer(self, rank: int, since: float | None) -> dict[str, Any]:
        now_tick = int(time.time() // self.interval_s)
        first = max(self.first_tick, now_tick - self.capacity + 1)
        if since is not None:
            first = max(first, int(since // self.interval_s))
        samples = [self.sample(rank, t) for t in range(first, now_tick + 1)]
        fresh = [s for s in samples if since is None or s["at"] > since]
        return {"samples": fresh}


def _handler(nodes: Nodes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            match = _PATH.match(url.path)
            if match is None:
                self.send_error(404)
                return
            since = parse_qs(url.query).get("since")
            body = json.dumps(nodes.answer(int(match[1]), float(since[0]) if since else None))
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, required=True, help="a recorded Sample JSON")
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--capacity", type=int, default=720, help="samples kept per node")
    parser.add_argument("--warm", type=int, default=0,
                        help="samples each ring already holds at the start (0: agents that start "
                             "with this process; 720: agents up for an hour or more)")  # fmt: skip
    args = parser.parse_args()
    template = json.loads(args.sample.read_text())
    nodes = Nodes(template, args.interval, args.capacity, args.warm)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(nodes))
    server.daemon_threads = True
    args.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
