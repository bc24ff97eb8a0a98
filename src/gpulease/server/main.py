"""``python -m gpulease.server run [--host H] [--port P]``: the server process
(``rotate-secrets-key``: :mod:`gpulease.server.vault.command`).

Start-up: take ``<home>/server.lock`` (one server per home; a second exits with code 3), open and
migrate the state DB, build the providers, the agent connector, the reconcile loop and the
telemetry relay (its own thread, :mod:`gpulease.server.telemetry.relay`) and the services' load
history (its own thread, :mod:`gpulease.server.service_load`), bind the port
(``--port 0``: any free one), write ``<home>/server.json`` (``pid``, ``host``, ``port``, ``url``)
for the client, serve the API with uvicorn until SIGTERM / SIGINT / ``POST /v1/server/shutdown``,
then stop the loops and remove ``server.json``. Clusters keep running while
the server is away; the next server resumes them from the DB.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import uvicorn
from fastapi import FastAPI
from sqlalchemy import Engine

from gpulease import config
from gpulease.atomic import write_json_atomic
from gpulease.clock import SystemClock
from gpulease.controller import Reconciler
from gpulease.controller.job_loop import JobReconciler
from gpulease.controller.pool_loop import PoolReconciler
from gpulease.controller.service_loop import ServiceReconciler
from gpulease.controller.storage_accrual import StorageAccrual
from gpulease.errors import UserInputError
from gpulease.filesync import max_bytes
from gpulease.server.agents import HttpAgents
from gpulease.server.api import create_app
from gpulease.server.audit import AuditService
from gpulease.server.bench import OBSERVED_EVERY_S, BenchService
from gpulease.server.budget_loop import budget_loop
from gpulease.server.ckpt_syncs import CheckpointSyncs
from gpulease.server.cost_routes import CostReports
from gpulease.server.endpoints import Endpoints
from gpulease.server.jobs import JobService
from gpulease.server.keys import api_token, server_key
from gpulease.server.metrics import (
    ControlPlaneCollector,
    MetricsEndpoint,
    metrics_registry,
    open_to_loopback,
)
from gpulease.server.metrics_jobs import JobMetricInputs
from gpulease.server.periodic import PeriodicThread
from gpulease.server.pools import PoolService
from gpulease.server.provider_calls import ProviderCalls
from gpulease.server.provider_outages import ProviderOutages
from gpulease.server.providers import build_providers, describe, provider_settings
from gpulease.server.registry_logins import RegistryLogins
from gpulease.server.runtime import LoopThread
from gpulease.server.service import ClusterService
from gpulease.server.service_load import LoadHistory, LoadHistoryThread
from gpulease.server.services import ServiceOps
from gpulease.server.sla import sla_view
from gpulease.server.telemetry import LatestSamples, TelemetryReader, telemetry_settings
from gpulease.server.telemetry.prom import RelayedMetrics
from gpulease.server.telemetry.relay import HttpMetrics, Relay, RelayThread
from gpulease.server.vault import KmsUnavailable, open_vault
from gpulease.server.webui import Logins
from gpulease.state import open_database, server_owner_id, session_scope
from gpulease.storage.pricing import storage_pricing

log = logging.getLogger("gpulease.server")

INFO_FILE = "server.json"
LOCK_FILE = "server.lock"
ALREADY_RUNNING = 3
BAD_INPUT = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpulease.server")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="serve the API and run the reconcile loops")
    run.add_argument("--host", default="127.0.0.1", help="address to bind (loopback by default)")
    run.add_argument("--port", type=int, default=int(os.environ.get("GPULEASE_SERVER_PORT", "0")))
    run.add_argument("--log-level", default=os.environ.get("GPULEASE_LOG_LEVEL", "INFO"))
    rotate = commands.add_parser("rotate-secrets-key", help="rotate the vault's key (server.vault)")
    rotate.add_argument("--log-level", default=os.environ.get("GPULEASE_LOG_LEVEL", "WARNING"))
    return parser


def _take_lock(home: Path) -> IO[str] | None:
    handle = open(home / LOCK_FILE, "a")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def _write_info(home: Path, data: dict[str, Any]) -> None:
    write_json_atomic(home / INFO_FILE, data)


def _remove_info(home: Path) -> None:
    path = home / INFO_FILE
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _python_first_on_path() -> None:
    """Local nodes inherit this process's environment: put the Python gpulease runs in first on
    ``PATH``, so ``python`` in a task's script is the one with gpulease (and torch) installed,
    even when the virtual environment was never activated."""
    bin_dir = str(Path(sys.executable).parent)
    parts = os.environ.get("PATH", "").split(os.pathsep)
    if parts[:1] != [bin_dir]:
        os.environ["PATH"] = os.pathsep.join([bin_dir, *(p for p in parts if p != bin_dir)])


@dataclass
class _Parts:
    engine: Engine
    agents: HttpAgents
    loop: LoopThread
    app: FastAPI
    relay: RelayThread | None = None
    server: uvicorn.Server | None = None
    storage: StorageAccrual | None = None
    endpoints: Endpoints | None = None  # the services' load balancers
    load: LoadHistoryThread | None = None  # their recent load, for the dashboard
    observed: PeriodicThread | None = None  # the bench's observed summary, kept up to date
    services: ServiceReconciler | None = None


def _assemble(home: Path, host: str = "127.0.0.1") -> _Parts:
    """The DB, providers, agent connector, reconcile loop, service and app of one server
    (``host``: where the services' endpoints listen, the server's own address)."""
    clock = SystemClock()
    engine = open_database()
    with session_scope(engine) as session:
        owner = server_owner_id(session, now=clock.now())
    cfg = config.load_config()
    outages = ProviderOutages(engine, clock)  # provider_outages, for gpulease sla
    outages.close_stale()
    calls = ProviderCalls(watchers=(outages,))  # gpulease_provider_api_calls_total
    providers = build_providers(cfg, calls=calls)
    for provider in providers.values():  # a killed server's SSH tunnels, before any loop runs
        provider.release_leftovers()
    settings = provider_settings(cfg)
    file_limit = max_bytes(cfg)
    syncs = CheckpointSyncs()
    registry_logins = RegistryLogins(config.registry_entries(cfg))  # passwords: this env
    vault = open_vault(home, engine, cfg)  # tasks' secrets, sealed in the state DB
    agents = HttpAgents(providers, server_key(home), file_limit=file_limit, syncs=syncs,
                        logins=registry_logins, secrets=vault.load)  # fmt: skip
    job_loop = JobReconciler(engine, providers, agents, clock=clock, owner=owner)
    budgets = budget_loop(engine, cfg, providers, clock=clock, stop_job=job_loop.stop_for_budget)
    storage = StorageAccrual(engine, storage_pricing(cfg), clock)  # cost: storage rows
    pool_loop = PoolReconciler(engine, clock=clock, owner=owner)
    endpoints = Endpoints(host)
    service_loop = ServiceReconciler(engine, providers, endpoints, clock=clock, owner=owner)
    loop = LoopThread(Reconciler(engine, providers, agents, clock=clock, owner=owner,
                                 storage=storage), jobs=job_loop, budgets=budgets,
                      pools=pool_loop, services=service_loop)  # fmt: skip
    service = ClusterService(engine, providers, agents, clock=clock,
                             owner=owner, wake=loop.wake, file_limit=file_limit)  # fmt: skip
    service.budgets = budgets
    service.registry_logins = registry_logins
    service.vault = vault
    jobs = JobService(engine, service, job_loop, wake=loop.wake)
    pools = PoolService(engine, service, wake=loop.wake)
    parts = _Parts(engine, agents, loop, app=FastAPI(), storage=storage, endpoints=endpoints,
                   services=service_loop)  # fmt: skip
    inputs = JobMetricInputs(clock, job_loop.job_clock, syncs, calls)
    collector = ControlPlaneCollector(engine, pass_times=loop.times, jobs=inputs,
                                      budgets=budgets, services=endpoints)  # fmt: skip
    telemetry = telemetry_settings(cfg)
    latest, relayed = LatestSamples(), RelayedMetrics(telemetry.interval_s)
    metrics = MetricsEndpoint(metrics_registry(collector), open_to_loopback=open_to_loopback(cfg),
                              sources=(relayed.text,))  # fmt: skip
    reader = TelemetryReader(engine, telemetry, latest, clock=clock)
    parts.relay = RelayThread(Relay(engine, HttpMetrics(agents), telemetry, clock=clock,
                                    latest=latest, metrics=relayed))  # fmt: skip
    load = LoadHistory(endpoints, clock, step_s=telemetry.interval_s)
    parts.load = LoadHistoryThread(load)
    benches = BenchService(engine, service, home=home, clock=clock)
    parts.observed = PeriodicThread("bench-observed", benches.refresh_observed,
                                    lambda: OBSERVED_EVERY_S)  # fmt: skip

    def shutdown() -> None:
        if parts.server is not None:
            parts.server.should_exit = True

    parts.app = create_app(
        service,
        api_token(home),
        info=lambda: {"owner": owner, "providers": describe(providers, settings)},
        shutdown=shutdown,
        jobs=jobs,
        audit=AuditService(engine, clock=clock, catalog=service.catalog, config=cfg),
        metrics=metrics,
        telemetry=reader,
        logins=Logins(clock),
        cost=CostReports(engine, clock),
        sla=lambda month: sla_view(engine, cfg, clock, month),
        budgets=budgets,
        pools=pools,
        services=ServiceOps(engine, service, endpoints, wake=loop.wake, load_history=load),
        benches=benches,
    )
    return parts


def _exit_cleanly_on_signals(parts: _Parts) -> None:
    """uvicorn re-raises the SIGTERM / SIGINT it handled once it has shut down; with these
    handlers in place that ends ``run()`` normally, so the cleanup below still runs."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if parts.server is not None:
            parts.server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)


def serve(host: str, port: int) -> int:
    home = config.home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock = _take_lock(home)
    if lock is None:
        print(f"a gpulease server already runs for {home}", file=sys.stderr)
        return ALREADY_RUNNING
    _python_first_on_path()
    parts = _assemble(home, host)
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    config_ = uvicorn.Config(parts.app, log_level="warning", access_log=False, lifespan="off")
    parts.server = uvicorn.Server(config_)
    _exit_cleanly_on_signals(parts)
    if parts.endpoints is not None:
        parts.endpoints.open_live(parts.engine)  # live services' endpoints, on their ports
    parts.loop.start()
    if parts.relay is not None:
        parts.relay.start()
    if parts.load is not None:
        parts.load.start()
    if parts.observed is not None:
        parts.observed.start()
    url = f"http://{host}:{bound}"
    _write_info(home, {"pid": os.getpid(), "host": host, "port": bound, "url": url,
                       "started_at": time.time()})  # fmt: skip
    log.info("gpulease server %d listening on %s", os.getpid(), url)
    try:
        parts.server.run(sockets=[sock])
    finally:
        if parts.relay is not None:
            parts.relay.stop()
        if parts.load is not None:
            parts.load.stop()
        if parts.observed is not None:
            parts.observed.stop()
        parts.loop.stop()
        if parts.endpoints is not None:
            parts.endpoints.close_all()
        if parts.services is not None:
            parts.services.close()
        if parts.storage is not None:
            parts.storage.close()
        parts.agents.close()
        _remove_info(home)
        parts.engine.dispose()
        lock.close()
        log.info("gpulease server stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per agent poll otherwise
    try:
        if args.command == "rotate-secrets-key":
            from gpulease.server.vault.command import rotate_secrets_key

            return rotate_secrets_key()
        return serve(args.host, args.port)
    except UserInputError as exc:  # a bad config file: one line naming the key, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KmsUnavailable as exc:  # the vault's keyring cannot be unsealed: nothing can start
        print(f"error: {exc}", file=sys.stderr)
        return 1
