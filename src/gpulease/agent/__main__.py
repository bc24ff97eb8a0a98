"""``python -m gpulease.agent serve …``: parse arguments, bind, write the port file, serve until
SIGTERM, SIGINT or ``POST /v1/shutdown``; write the heartbeat file and sample the node's
telemetry (``--metrics-interval``: GPUs, host, the job's train figures, the peers' round trips)
meanwhile.

Start-up is kept light (argparse and the stdlib HTTP server): the agent answers within a few
hundred milliseconds of its start (see ``docs/agent.md``).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import stat
import sys
import threading
from pathlib import Path
from types import FrameType

from gpulease.agent.ckpt_sync import DEFAULT_FINAL_SYNC_TIMEOUT_S
from gpulease.agent.http import AgentHTTPServer
from gpulease.agent.service import Agent
from gpulease.agent.staging import DEFAULT_MAX_UPLOAD_MB
from gpulease.agent.telemetry import (
    DEFAULT_CAPACITY,
    DEFAULT_INTERVAL_S,
    FakeGpuSampler,
    FakeGpuScript,
    GpuSource,
    NvmlSampler,
    PeerProber,
    SampleRing,
    TelemetrySampler,
    TrainStatsReader,
)
from gpulease.atomic import write_atomic
from gpulease.clock import SystemClock

log = logging.getLogger("gpulease.agent")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpulease.agent")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the agent API on this node")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (only this one)")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--port-file", type=Path, help="write the bound port here")
    serve.add_argument("--token-file", type=Path, required=True, help="the node's bearer token")
    serve.add_argument("--node-dir", type=Path, required=True, help="the node's directory")
    serve.add_argument("--node-rank", type=int, default=None)
    serve.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds")
    serve.add_argument(
        "--final-sync-timeout",
        type=float,
        default=DEFAULT_FINAL_SYNC_TIMEOUT_S,
        help="seconds the final checkpoint sync may take before the task ends without it",
    )
    serve.add_argument(
        "--max-upload-mb",
        type=float,
        default=DEFAULT_MAX_UPLOAD_MB,
        help="the largest upload (PUT /v1/files/...) this node accepts, in MB (10**6 bytes)",
    )
    serve.add_argument(
        "--imds",
        action="store_true",
        help="poll EC2 instance metadata for spot interruption notices "
        "(also on when $GPULEASE_AGENT_IMDS_URL is set)",
    )
    serve.add_argument(
        "--venv-root",
        type=Path,
        default=None,
        help="where task environments (venvs keyed by the setup script) are made and shared; "
        "default: NODE_DIR/venvs",
    )
    serve.add_argument(
        "--metrics-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help="seconds between telemetry samples (GET /v1/metrics); 0 turns sampling off",
    )
    serve.add_argument(
        "--metrics-capacity",
        type=int,
        default=DEFAULT_CAPACITY,
        help="how many samples the agent keeps in memory (the oldest are dropped)",
    )
    serve.add_argument(
        "--fake-gpus",
        metavar="JSON",
        default=None,
        help="report scripted fake GPUs instead of NVML's (the local provider passes it)",
    )
    serve.add_argument("--log-level", default="INFO")
    return parser


def _telemetry(
    args: argparse.Namespace, parser: argparse.ArgumentParser
) -> TelemetrySampler | None:
    """The sampler ``serve`` asked for (None: sampling off); bad values exit 2 naming the flag."""
    if args.metrics_interval < 0 or not math.isfinite(args.metrics_interval):
        parser.error("--metrics-interval: seconds >= 0 (0 turns sampling off)")
    if args.metrics_capacity < 1:
        parser.error("--metrics-capacity: at least 1 sample")
    gpus: GpuSource = NvmlSampler()
    if args.fake_gpus is not None:
        try:
            gpus = FakeGpuSampler(FakeGpuScript.parse(args.fake_gpus))
        except ValueError as exc:
            parser.error(f"--fake-gpus: {exc}")
    if args.metrics_interval == 0:
        return None
    ring = SampleRing(args.metrics_capacity)
    return TelemetrySampler(ring, gpus, SystemClock(), interval_s=args.metrics_interval)


def _job_and_peers(agent: Agent, telemetry: TelemetrySampler | None) -> PeerProber | None:
    """Feed the sampler the job's train figures and the peers' round trips (their prober, run
    at the sampling interval; None when sampling is off)."""
    if telemetry is None:
        return None
    telemetry.train = TrainStatsReader(agent.train_stats_file).read
    prober = PeerProber(agent.peer_targets, interval_s=telemetry.interval_s)
    telemetry.peers = prober.latest
    return prober


def read_token(path: Path) -> bytes:
    """The token file's content, stripped; a warning when others may read the file."""
    token = path.read_bytes().strip()
    if not token:
        raise SystemExit(f"agent: the token file {path} is empty")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("the token file %s is readable by others; chmod 600 it", path)
    return token


def _write_port_file(path: Path, port: int) -> None:
    write_atomic(path, f"{port}\n")


def serve(args: argparse.Namespace, telemetry: TelemetrySampler | None = None) -> int:
    token = read_token(args.token_file)
    agent = Agent(
        args.node_dir,
        node_rank=args.node_rank,
        final_sync_timeout_s=args.final_sync_timeout,
        venv_root=args.venv_root,
        max_upload_bytes=int(args.max_upload_mb * 1_000_000),
    )
    agent.telemetry = telemetry
    server = AgentHTTPServer((args.host, args.port), agent, token)
    port = agent.port = server.server_address[1]
    peers = _job_and_peers(agent, telemetry)
    if args.port_file:
        _write_port_file(args.port_file, port)

    def _on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name)
        agent.stopping.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    threading.Thread(target=server.serve_forever, args=(0.1,), name="http", daemon=True).start()
    if args.imds or os.environ.get("GPULEASE_AGENT_IMDS_URL"):
        from gpulease.agent.imds import ImdsPoller  # only then: start-up stays light

        ImdsPoller(agent.preempt_current).start()
    if telemetry is not None:
        telemetry.start()
    if peers is not None:
        peers.start()
    log.info("agent listening on %s:%d, node dir %s", args.host, port, args.node_dir)
    try:
        agent.write_heartbeat()
        while not agent.stopping.wait(args.heartbeat_interval):
            agent.write_heartbeat()
    finally:
        if telemetry is not None:
            telemetry.stop()
        if peers is not None:
            peers.stop()
        server.shutdown()
        server.server_close()
        log.info("agent stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    telemetry = _telemetry(args, parser)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return serve(args, telemetry)


if __name__ == "__main__":
    sys.exit(main())
