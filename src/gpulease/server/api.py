"""The REST API (FastAPI, JSON, under ``/v1``) over
:class:`~gpulease.server.service.ClusterService`.

Every route needs ``Authorization: Bearer <token>`` (the ``server.token`` file in the home) —
or, for the dashboard's read routes (GET only), its session cookie (``server/webui``);
``GET /metrics`` (Prometheus text, outside ``/v1``) too, unless the config opens it to loopback
scrapers.
A launch's body carries the task (its ``secrets:`` by name only) and, beside it, ``secrets``: the
values, typed :class:`~pydantic.SecretStr` from here on and never echoed — a 422 names fields,
never the input.
Errors are ``{"error": {"code", "message"}}`` with status 422 (bad input), 404 (no such cluster),
409 (the cluster's status forbids it, or the name is taken), 503 (retry later) or 500. Routes are
listed in docs/server.md. Moves no states itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from gpulease import __version__
from gpulease.errors import GpuleaseError, Retryable, UserInputError
from gpulease.server.budget_loop import BudgetLoop
from gpulease.server.cost_routes import CostReports, cost_routes
from gpulease.server.jobs import JobService
from gpulease.server.keys import same_token
from gpulease.server.metrics import CONTENT_TYPE, MetricsEndpoint, is_loopback
from gpulease.server.pools import PoolService, pool_routes
from gpulease.server.profiles import ProfileFetch, profile_routes
from gpulease.server.service import KEEP_GPU_RULE, ClusterService, Conflict, NotFound
from gpulease.server.telemetry.reads import TelemetryReader
from gpulease.server.webui import Logins, cookie_may_read, login_route, mount_ui
from gpulease.state import ClusterExists

if TYPE_CHECKING:
    from gpulease.server.audit import AuditService  # GET /v1/audit
    from gpulease.server.bench import BenchService  # /v1/clusters/{name}/bench, /v1/bench
    from gpulease.server.services import ServiceOps  # /v1/services


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LaunchBody(_Body):
    task: dict[str, Any]
    name: str | None = None
    workdir: str | None = None
    secrets: dict[str, SecretStr] = Field(default_factory=dict)  # the task's secrets' values
    autostop_minutes: int | None = Field(default=None, ge=0)
    down: bool | None = None  # None: the task's resources.autostop.down
    over_budget: bool = False  # launch although a block budget refuses it


class JobLaunchBody(_Body):
    task: dict[str, Any]
    name: str | None = None
    workdir: str | None = None
    secrets: dict[str, SecretStr] = Field(default_factory=dict)  # the task's secrets' values
    over_budget: bool = False  # launch although a block budget refuses it


class AutostopBody(_Body):
    minutes: int | None = Field(default=None, ge=0)
    down: bool = False
    # the load rule (percent); left out: the cluster keeps its rule; minutes None clears it too
    gpu_utilisation_below: float | None = Field(default=None, gt=0, le=100)


class ExecBody(_Body):
    command: str = Field(min_length=1)
    rank: int = Field(default=0, ge=0)
    timeout_s: float = Field(default=60.0, gt=0, le=3600)


def _status_of(exc: GpuleaseError) -> tuple[int, str]:
    if isinstance(exc, NotFound):
        return 404, "not_found"
    if isinstance(exc, Conflict | ClusterExists):
        return 409, "conflict"
    if isinstance(exc, UserInputError):
        return 422, "invalid"
    if isinstance(exc, Retryable):
        return 503, "unavailable"
    return 500, "failed"


def create_app(
    service: ClusterService,
    token: SecretStr,
    *,
    info: Callable[[], dict[str, Any]] = dict,
    shutdown: Callable[[], None] = lambda: None,
    jobs: JobService | None = None,
    audit: AuditService | None = None,
    metrics: MetricsEndpoint | None = None,
    telemetry: TelemetryReader | None = None,
    logins: Logins | None = None,
    cost: CostReports | None = None,
    sla: Callable[[str | None], dict[str, Any]] | None = None,
    budgets: BudgetLoop | None = None,
    pools: PoolService | None = None,
    services: ServiceOps | None = None,
    benches: BenchService | None = None,
) -> FastAPI:
    """The app; with ``logins``, also the web dashboard (``/ui``, its login-link route, and its
    session cookie as a credential for the read routes of ``webui.COOKIE_READABLE``)."""
    app = FastAPI(title="gpulease", version=__version__, docs_url=None, redoc_url=None)

    def bearer(authorization: Annotated[str, Header()] = "") -> None:
        scheme, _, presented = authorization.partition(" ")
        if scheme.lower() != "bearer" or not same_token(presented.strip(), token):
            raise _Unauthorised()

    def authorised(request: Request, authorization: Annotated[str, Header()] = "") -> None:
        if logins is not None and not authorization and cookie_may_read(request, logins):
            return
        bearer(authorization)

    if metrics is not None:
        _metrics_route(app, metrics, bearer)

    router = APIRouter(prefix="/v1", dependencies=[Depends(authorised)])
    if logins is not None:
        login_route(router, logins)
        mount_ui(app, logins)
    _server_routes(router, info, shutdown)
    _cluster_routes(router, service)
    _agent_routes(router, service)
    profile_routes(router, ProfileFetch(service))  # /v1/clusters/{name}/profile (profiles.py)
    if jobs is not None:
        _job_routes(router, jobs)
    if audit is not None:
        _audit_routes(router, audit)
    if telemetry is not None:
        _telemetry_routes(router, telemetry)
    if cost is not None:
        cost_routes(router, cost)  # GET /v1/cost
    if sla is not None:
        _sla_route(router, sla)
    _budget_routes(router, budgets)
    if pools is not None:
        pool_routes(router, pools)  # /v1/pools
    if services is not None:
        from gpulease.server.services import service_routes

        service_routes(router, services)  # /v1/services (docs/serving.md)
    if benches is not None:
        from gpulease.server.bench_routes import bench_routes

        bench_routes(router, benches)  # /v1/clusters/{name}/bench, /v1/bench (docs/bench.md)
    app.include_router(router)
    app.add_exception_handler(GpuleaseError, _error_response)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(_Unauthorised, _unauthorised)
    return app


def _error_response(_request: Request, exc: GpuleaseError) -> JSONResponse:
    status, code = _status_of(exc)
    return JSONResponse({"error": {"code": code, "message": str(exc)}}, status_code=status)


def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body or parameter that fails its model: 422 in the usual error shape, each problem as
    ``where: what`` — never the ``input`` FastAPI's own answer echoes (a request's ``secrets``
    hold values that no answer may repeat)."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append(f"{where}: {error.get('msg', 'invalid')}" if where else error["msg"])
    message = "; ".join(dict.fromkeys(problems)) or "invalid request"
    return JSONResponse({"error": {"code": "invalid", "message": message}}, status_code=422)


def _unauthorised(_request: Request, _exc: Exception) -> JSONResponse:
    body = {"error": {"code": "unauthorized", "message": "a valid bearer token is required"}}
    return JSONResponse(body, status_code=401)


def _server_routes(
    router: APIRouter, info: Callable[[], dict[str, Any]], shutdown: Callable[[], None]
) -> None:
    started = time.time()

    @router.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "version": __version__, "pid": os.getpid(),
                "uptime_s": round(time.time() - started, 3), **info()}  # fmt: skip

    @router.get("/providers")
    def providers() -> dict[str, Any]:
        return {"providers": info().get("providers", [])}

    @router.post("/server/shutdown", status_code=202)
    def stop_server() -> dict[str, Any]:
        shutdown()
        return {"stopping": True}


def _metrics_route(
    app: FastAPI, metrics: MetricsEndpoint, authorised: Callable[[str], None]
) -> None:
    @app.get("/metrics", include_in_schema=False)
    def scrape(request: Request, authorization: Annotated[str, Header()] = "") -> Response:
        peer = request.client.host if request.client is not None else None
        if not (metrics.open_to_loopback and is_loopback(peer)):
            authorised(authorization)
        return Response(metrics.text(), media_type=CONTENT_TYPE)


def _cluster_routes(router: APIRouter, service: ClusterService) -> None:
    @router.post("/clusters", status_code=201)
    def launch(body: LaunchBody) -> dict[str, Any]:
        return service.launch(body.task, name=body.name, workdir=body.workdir,
                              autostop_minutes=body.autostop_minutes, down=body.down,
                              over_budget=body.over_budget, secrets=body.secrets)  # fmt: skip

    @router.get("/clusters")
    def clusters() -> dict[str, Any]:
        return {"clusters": service.list()}

    @router.get("/clusters/{name}")
    def cluster(name: str, history: bool = False) -> dict[str, Any]:
        return service.get(name, with_history=history)

    @router.post("/clusters/{name}/down")
    def down(name: str) -> dict[str, Any]:
        return service.down(name)

    @router.post("/clusters/{name}/stop")
    def stop(name: str) -> dict[str, Any]:
        return service.stop(name)

    @router.post("/clusters/{name}/start")
    def start(name: str) -> dict[str, Any]:
        return service.start(name)

    @router.post("/clusters/{name}/autostop")
    def autostop(name: str, body: AutostopBody) -> dict[str, Any]:
        given = "gpu_utilisation_below" in body.model_fields_set
        gpu_below = body.gpu_utilisation_below if given else KEEP_GPU_RULE
        return service.autostop(name, body.minutes, body.down, gpu_below=gpu_below)


def _agent_routes(router: APIRouter, service: ClusterService) -> None:
    @router.get("/clusters/{name}/logs")
    def logs(name: str, offset: int = 0, rank: int = 0, wait_s: float = 0.0) -> Response:
        chunk, status = service.logs(name, offset=max(offset, 0), rank=rank, wait_s=wait_s)
        headers = {
            "X-Gpulease-Next-Offset": str(chunk.next_offset),
            "X-Gpulease-Log-Complete": "true" if chunk.complete else "false",
            "X-Gpulease-Task-State": chunk.state.value,
            "X-Gpulease-Cluster-Status": status.value,
        }
        return Response(chunk.data, media_type="application/octet-stream", headers=headers)

    @router.get("/clusters/{name}/ssh")
    def ssh_target(name: str, rank: int = 0) -> dict[str, Any]:
        return service.ssh_target(name, rank)

    @router.post("/clusters/{name}/exec")
    def exec_(name: str, body: ExecBody) -> dict[str, Any]:
        result = service.exec(name, body.command, rank=body.rank, timeout_s=body.timeout_s)
        return {"exit_code": result.exit_code, "output": result.output,
                "timed_out": result.timed_out}  # fmt: skip


def _job_routes(router: APIRouter, jobs: JobService) -> None:
    @router.post("/jobs", status_code=201)
    def launch_job(body: JobLaunchBody) -> dict[str, Any]:
        return jobs.launch(body.task, name=body.name, workdir=body.workdir,
                           over_budget=body.over_budget, secrets=body.secrets)  # fmt: skip

    @router.get("/jobs")
    def list_jobs(all: bool = True) -> dict[str, Any]:
        return {"jobs": jobs.list(all_jobs=all)}

    @router.get("/jobs/{job_id}")
    def job(job_id: int, history: bool = False) -> dict[str, Any]:
        return jobs.get(job_id, with_history=history)

    @router.post("/jobs/{job_id}/cancel")
    def cancel_job(job_id: int) -> dict[str, Any]:
        return jobs.cancel(job_id)

    @router.get("/jobs/{job_id}/logs")
    def job_logs(
        job_id: int, attempt: int | None = None, offset: int = 0, wait_s: float = 0.0
    ) -> Response:
        chunk, view = jobs.logs(job_id, attempt=attempt, offset=max(offset, 0), wait_s=wait_s)
        headers = {
            "X-Gpulease-Next-Offset": str(chunk.next_offset),
            "X-Gpulease-Log-Complete": "true" if chunk.complete else "false",
            "X-Gpulease-Task-State": chunk.state.value,
            "X-Gpulease-Job-Status": view["status"],
            "X-Gpulease-Job-Attempt": str(view["attempt"]),
        }
        return Response(chunk.data, media_type="application/octet-stream", headers=headers)


def _budget_routes(router: APIRouter, budgets: BudgetLoop | None) -> None:
    @router.get("/budgets")
    def list_budgets() -> dict[str, Any]:
        """Each ``budgets:`` entry with its period's spend (``gpulease status``)."""
        return {"budgets": [] if budgets is None else [s.view() for s in budgets.states()]}


def _telemetry_routes(router: APIRouter, telemetry: TelemetryReader) -> None:
    """The relayed telemetry (docs/metrics.md, "The read API"); ``since`` and ``resolution``
    are checked by the reader, so a bad one is a 422 naming it in the usual error shape."""

    @router.get("/clusters/{name}/telemetry")
    def cluster_telemetry(
        name: str, since: str | None = None, resolution: str | None = None
    ) -> dict[str, Any]:
        return telemetry.cluster(name, since, resolution)

    @router.get("/jobs/{job_id}/telemetry")
    def job_telemetry(
        job_id: int, since: str | None = None, resolution: str | None = None
    ) -> dict[str, Any]:
        return telemetry.job(job_id, since, resolution)

    @router.get("/telemetry/latest")
    def latest(cluster: str | None = None) -> dict[str, Any]:
        return telemetry.latest_view(cluster)


def _sla_route(router: APIRouter, sla: Callable[[str | None], dict[str, Any]]) -> None:
    """``GET /v1/sla?month=2026-11``: availability and credits (docs/cost-sla.md); a bad month is
    a 422 naming ``--month``."""

    @router.get("/sla")
    def sla_report(month: str | None = None) -> dict[str, Any]:
        return sla(month)


class _Unauthorised(Exception):
    pass


def _audit_routes(router: APIRouter, audit: AuditService) -> None:
    """The quarterly audit (docs/cost-audit.md); a bad ``since`` is a 422 naming it."""

    @router.get("/audit")
    def audit_findings(since: str | None = None) -> dict[str, Any]:
        return audit.audit(since)
