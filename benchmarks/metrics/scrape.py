"""The server's ``GET /metrics`` scrape time and memory with 1,000 reporting nodes of 8 GPUs,
against the same server with none.

What runs (per scenario, in a fresh child process, so one's memory does not leak into the
other's figures):

- a migrated SQLite state DB with ``--nodes`` running single-node clusters (spot, priced, one
  READY node each whose ``agent_url`` points at a synthetic agent): the worst case for the
  control plane's per-cluster series;
- the server's real parts, wired as ``server/main.py`` wires them: the control-plane collector
  (``ControlPlaneCollector`` with the jobs' and providers' families), the telemetry relay
  (``Relay`` over ``HttpMetrics(HttpAgents)``: the server's own agent clients, one per node)
  and its renderer (``RelayedMetrics``, a ``MetricSource``), and the FastAPI app served by
  uvicorn on a loopback port. The reconcile loops do not run (the synthetic nodes belong to no
  provider: the loops would only mark them lost);
- the synthetic agents (``synthetic_agents.py``, one process): every node answers
  ``/v1/metrics?since=`` over real HTTP with a sample RECORDED from a real agent with 8 fake
  GPUs at the start of the run, re-stamped every 5 s (the agent's default interval) with
  per-node, per-GPU load. The relay really pulls, folds and stores them (``telemetry_points``)
  and renders the relayed text: 8,000 GPU samples per pass.

Measured: ``--passes`` relay passes ``--relay-interval`` s apart, one after the other (each
pass's wall time: pull every node over HTTP, fold, upsert, render); then the relay goes on in
its own thread, as in the server, while ANOTHER process (this script's parent, as Prometheus
would be) sends ``--scrapes`` ``GET /metrics`` with the token over loopback HTTP (httpx, one
connection, ``--scrape-gap`` s apart, so some scrapes overlap a relay pass): wall time per
scrape, bytes, series. Then the server process's RSS (``psutil``, after ``gc.collect()``). The
extra memory is the RSS with nodes minus the RSS with none. ``GL_BENCH_TRACE_MEMORY=1`` also
prints the traced Python memory's peak per phase and the top allocation sites (slower).

    python benchmarks/metrics/scrape.py [--nodes 1000] [--passes 3] [--scrapes 20] [--json F]

Targets (issue 15): a scrape < 500 ms and < 100 MB extra at 1,000 nodes × 8 GPUs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _agent import agent_samples, fake_gpus, start_agent  # benchmarks/metrics/_agent.py

HERE = Path(__file__).resolve().parent
TOKEN = "bench-metrics-token"


def _write_fleet(engine: Any, nodes: int, agents_url: str) -> None:
    from gpulease.state import (
        ClusterStatus,
        LaunchTarget,
        NodeState,
        create_cluster,
        ensure_node,
        session_scope,
        set_status,
    )

    target = LaunchTarget(provider="bench", region="us-east-1", zone="us-east-1a",
                          instance_type="p5.48xlarge", accelerator="H100", gpus_per_node=8,
                          num_nodes=1, pricing="spot", price_per_hour=31.46)  # fmt: skip
    now = time.time()
    for first in range(0, nodes, 200):
        with session_scope(engine) as s:
            for rank in range(first, min(nodes, first + 200)):
                cluster, _ = create_cluster(s, name=f"bench-{rank}", target=target, task={},
                                            owner="bench", actor="bench", now=now)  # fmt: skip
                for status in (ClusterStatus.PROVISIONING, ClusterStatus.SETTING_UP,
                               ClusterStatus.RUNNING):  # fmt: skip
                    set_status(s, cluster, status, actor="bench", reason="bench", now=now)
                url = f"{agents_url}/n/{rank}"
                node = ensure_node(s, cluster, instance_id=f"i-{rank}", node_rank=0,
                                   actor="bench", now=now, agent_url=url)  # fmt: skip
                s.flush()
                set_status(s, node, NodeState.READY, actor="bench", reason="bench", now=now)


def _serve(app: Any) -> tuple[Any, threading.Thread, int]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    return server, thread, int(sock.getsockname()[1])


def _relay_passes(relay: Any, passes: int, interval_s: float) -> tuple[list[float], list[int]]:
    """Run ``passes`` relay passes ``interval_s`` apart: each one's seconds and samples folded."""
    pass_s, folded = [], []
    for i in range(passes):
        started = time.perf_counter()
        folded.append(relay.run_pass())
        pass_s.append(time.perf_counter() - started)
        if i + 1 < passes:
            time.sleep(max(0.0, interval_s - pass_s[-1]))
    return pass_s, folded


def _scrapes(port: int, scrapes: int, gap_s: float) -> tuple[list[float], int, str]:
    """``scrapes`` GET /metrics ``gap_s`` apart: the seconds of each, the last one's bytes and
    text."""
    import httpx

    scrape_s, size, text = [], 0, ""
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        for _ in range(scrapes):
            started = time.perf_counter()
            response = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
            scrape_s.append(time.perf_counter() - started)
            response.raise_for_status()
            text, size = response.text, len(response.content)
            time.sleep(gap_s)
    return scrape_s, size, text


def child(nodes: int, agents_url: str, passes: int, interval_s: float) -> None:
    """One scenario's server: ``passes`` timed relay passes, then the relay goes on in its own
    thread (as in the server) while the parent scrapes; print ``{"port"}``, wait for a line on
    stdin (the scrapes are done), print the figures as one JSON line."""
    import psutil
    from pydantic import SecretStr

    from gpulease.clock import SystemClock
    from gpulease.server.agents import HttpAgents
    from gpulease.server.api import create_app
    from gpulease.server.ckpt_syncs import CheckpointSyncs
    from gpulease.server.metrics import ControlPlaneCollector, MetricsEndpoint, metrics_registry
    from gpulease.server.metrics_jobs import JobMetricInputs
    from gpulease.server.provider_calls import ProviderCalls
    from gpulease.server.runtime import PassTimes
    from gpulease.server.service import ClusterService
    from gpulease.server.telemetry.prom import RelayedMetrics
    from gpulease.server.telemetry.relay import HttpMetrics, Relay, RelayThread
    from gpulease.server.telemetry.settings import TelemetrySettings
    from gpulease.state import make_engine
    from gpulease.state.migrate import upgrade

    clock = SystemClock()
    with tempfile.TemporaryDirectory(prefix="gl-bench-scrape-") as tmp:
        engine = make_engine(f"sqlite:///{tmp}/state.db")
        upgrade(engine)
        _write_fleet(engine, nodes, agents_url)
        syncs = CheckpointSyncs()
        agents = HttpAgents({}, secrets.token_bytes(32), syncs=syncs)
        relayed = RelayedMetrics(interval_s)
        relay = Relay(engine, HttpMetrics(agents), TelemetrySettings(interval_s=interval_s),
                      clock=clock, metrics=relayed)  # fmt: skip
        inputs = JobMetricInputs(clock, None, syncs, ProviderCalls())
        collector = ControlPlaneCollector(engine, pass_times=PassTimes(), jobs=inputs)
        endpoint = MetricsEndpoint(metrics_registry(collector), sources=(relayed.text,))
        service = ClusterService(engine, {}, agents, clock=clock, owner="bench")
        server, thread, port = _serve(create_app(service, SecretStr(TOKEN), metrics=endpoint))
        _peak("setup")
        pass_s, folded = _relay_passes(relay, passes, interval_s)
        _peak("relay passes")
        background = RelayThread(relay)
        background.start()
        print(json.dumps({"port": port}), flush=True)
        sys.stdin.readline()  # the parent's scrapes are done
        _peak("scrapes (relay running)")
        gc.collect()
        rss = psutil.Process().memory_info().rss
        if os.environ.get("GL_BENCH_TRACE_MEMORY"):  # where the memory is (slow: diagnosis only)
            _print_top_allocations()
        background.stop(120)
        server.should_exit = True
        thread.join(10)
        agents.close()
        engine.dispose()
    result = {"nodes": nodes, "passes_s": [round(x, 3) for x in pass_s],
              "samples_folded": folded, "rss_mb": round(rss / 1e6, 1)}  # fmt: skip
    print(json.dumps(result), flush=True)


def _peak(phase: str) -> None:
    """With ``GL_BENCH_TRACE_MEMORY``: the peak of traced Python memory since the last call."""
    if not os.environ.get("GL_BENCH_TRACE_MEMORY"):
        return
    import tracemalloc

    current, peak = tracemalloc.get_traced_memory()
    print(f"{phase}: traced now {current / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB", file=sys.stderr)
    tracemalloc.reset_peak()


def _print_top_allocations() -> None:
    import tracemalloc

    snapshot = tracemalloc.take_snapshot()
    for stat in snapshot.statistics("filename")[:12]:
        print(f"{stat.size / 1e6:8.1f} MB {stat.traceback[0].filename}", file=sys.stderr)


def _record_sample(tmp: Path, gpus: int) -> Path:
    """One sample of a real agent with ``gpus`` fake GPUs (and the real host sampler)."""
    proc = start_agent(tmp / "recorder", 1.0, fake_gpus(gpus))
    try:
        deadline = time.monotonic() + 30
        while not (samples := agent_samples(tmp / "recorder")):
            if time.monotonic() > deadline:
                raise SystemExit("the recording agent took no sample")
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)
    path = tmp / "sample.json"
    path.write_text(json.dumps(samples[-1]))
    return path


def _scenario(nodes: int, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the scenario's server process, scrape it from this one (as Prometheus would, from
    another process), then collect its figures."""
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--nodes", str(nodes),
               "--agents-url", url, "--passes", str(args.passes), "--relay-interval",
               str(args.relay_interval)]  # fmt: skip
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        port = int(json.loads(proc.stdout.readline())["port"])
        scrape_s, size, text = _scrapes(port, args.scrapes, args.scrape_gap)
        proc.stdin.write("done\n")
        proc.stdin.flush()
        result: dict[str, Any] = json.loads(proc.stdout.readline())
    finally:
        if proc.wait(300) != 0:
            raise SystemExit(f"scenario {nodes} failed (exit {proc.returncode})")
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    result.update({
        "scrape_ms": {"median": round(1000 * statistics.median(scrape_s), 1),
                      "max": round(1000 * max(scrape_s), 1), "min": round(1000 * min(scrape_s), 1)},
        "bytes": size, "series": len(lines),
        "gpu_series": sum(ln.startswith("gpulease_gpu_utilization_percent{") for ln in lines),
    })  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs in the recorded sample")
    parser.add_argument("--passes", type=int, default=3, help="relay passes before scraping")
    parser.add_argument("--relay-interval", type=float, default=10.0)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--scrape-gap", type=float, default=1.0, help="seconds between scrapes")
    parser.add_argument("--warm", type=int, default=0,
                        help="samples each synthetic agent's ring holds at the start")  # fmt: skip
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--agents-url", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if os.environ.get("GL_BENCH_TRACE_MEMORY"):
            import tracemalloc

            tracemalloc.start()
        child(args.nodes, args.agents_url, args.passes, args.relay_interval)
        return
    with tempfile.TemporaryDirectory(prefix="gl-bench-synth-") as tmp:
        sample = _record_sample(Path(tmp), args.gpus)
        port_file = Path(tmp) / "port"
        synth = subprocess.Popen([sys.executable, str(HERE / "synthetic_agents.py"), "--sample",
                                  str(sample), "--port-file", str(port_file),
                                  "--warm", str(args.warm)])  # fmt: skip
        try:
            while not (port_file.exists() and port_file.read_text().strip()):
                time.sleep(0.05)
            url = f"http://127.0.0.1:{port_file.read_text().strip()}"
            results = [_scenario(n, url, args) for n in (0, args.nodes)]
        finally:
            synth.terminate()
            synth.wait(10)
    none, full = results
    extra = round(full["rss_mb"] - none["rss_mb"], 1)
    print(f"{args.nodes} nodes × {args.gpus} GPUs vs none; {os.cpu_count()} CPUs, "
          f"Python {sys.version.split()[0]}")  # fmt: skip
    print("| nodes | relay pass (s) | series | bytes | scrape median / max (ms) | RSS (MB) |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in results:
        passes = ", ".join(f"{x:.2f}" for x in r["passes_s"])
        ms = r["scrape_ms"]
        print(f"| {r['nodes']} | {passes} | {r['series']} | {r['bytes']} | "
              f"{ms['median']} / {ms['max']} | {r['rss_mb']} |")  # fmt: skip
    print(f"extra RSS with {args.nodes} nodes: {extra} MB; GPU series: {full['gpu_series']}")
    if args.json:
        out = {"none": none, "full": full, "extra_rss_mb": extra, "gpus": args.gpus}
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
