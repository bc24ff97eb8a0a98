"""The SDK's HTTP client: one method per route of the server's ``/v1`` API (see docs/server.md).

Cluster views are returned as the server's JSON (dicts). Requests go through
:class:`gpulease.jsonhttp.JsonHttp` with the SDK's own errors (:mod:`gpulease.client.errors`).
Moves no states itself; the server does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from gpulease.client.bench import BenchRoutes
from gpulease.client.errors import ServerUnavailable, error_for
from gpulease.client.pools import PoolRoutes
from gpulease.client.profiles import ProfileRoutes
from gpulease.client.serving import ServingMixin
from gpulease.client.tasks import post_task
from gpulease.jsonhttp import ErrorAnswer, JsonHttp

if TYPE_CHECKING:
    from gpulease.spec import Task


@dataclass(frozen=True, slots=True)
class LogChunk:
    data: bytes
    next_offset: int
    complete: bool  # the task ended and every byte was handed out
    task_state: str
    cluster_status: str


@dataclass(frozen=True, slots=True)
class JobLogChunk:
    """A piece of a managed job's output: of attempt ``attempt`` (offsets restart at 0 with
    every attempt, each on fresh nodes)."""

    data: bytes
    next_offset: int
    complete: bool
    task_state: str
    job_status: str
    attempt: int


class _ServerHttp(JsonHttp):
    peer = "the gpulease server"
    unavailable = ServerUnavailable

    def error_for(self, answer: ErrorAnswer) -> Exception:
        return error_for(answer.status, answer.message)


class Client(PoolRoutes, ServingMixin, ProfileRoutes, BenchRoutes):  # client/*.py mixins
    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self._http = _ServerHttp(url, token=token, timeout=timeout, transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ---- routes -----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return self._http.json("GET", "/v1/health")

    def launch(
        self,
        task: Task | Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        autostop_minutes: int | None = None,
        down: bool | None = None,
        envs: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        over_budget: bool = False,
    ) -> dict[str, Any]:
        """Launch ``task`` (a :class:`~gpulease.spec.Task`, or a mapping in either task format)
        on a new cluster. Relative local paths (``workdir``, ``file_mounts`` sources) are taken
        from the current directory. ``envs`` (like ``--env``) win over the task's; an env a
        mapping lists without a value takes it from ``environ`` (e.g. ``os.environ``; default:
        nowhere) or the launch is refused (:class:`~gpulease.errors.SpecError`). ``secrets``
        (like ``--secret``) are the same for the task's ``secrets:`` (names it does not list are
        added); their values go in the request's own ``secrets`` field, never in the task, and
        no view returns them. The view has
        ``warnings``: the fields read but not honoured. ``autostop_minutes`` and ``down`` (None:
        the task's) override the task's ``resources.autostop``. A ``block`` budget of the
        server's config refuses the launch (:class:`~gpulease.errors.UserInputError` naming it)
        unless ``over_budget``."""
        return post_task(self._http, "/v1/clusters", task, workdir=workdir, envs=envs,
                         environ=environ, secrets=secrets, name=name,
                         autostop_minutes=autostop_minutes, down=down,
                         over_budget=over_budget or None)  # fmt: skip

    def clusters(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/clusters")["clusters"]
        return found

    def cluster(self, name: str, *, history: bool = False) -> dict[str, Any]:
        params = {"history": "true"} if history else None
        return self._http.json("GET", f"/v1/clusters/{name}", params=params)

    def down(self, name: str) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/clusters/{name}/down")

    def stop(self, name: str) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/clusters/{name}/stop")

    def start(self, name: str) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/clusters/{name}/start")

    def autostop(
        self,
        name: str,
        minutes: int | None,
        *,
        down: bool = False,
        gpu_utilisation_below: float | None = None,
    ) -> dict[str, Any]:
        """Autostop after ``minutes`` idle (None: off, the load rule too); with
        ``gpu_utilisation_below``, idle also while the GPUs stay below that percentage (left
        out: the cluster keeps the rule it has)."""
        body: dict[str, Any] = {"minutes": minutes, "down": down}
        if gpu_utilisation_below is not None:
            body["gpu_utilisation_below"] = gpu_utilisation_below
        return self._http.json("POST", f"/v1/clusters/{name}/autostop", json=body)

    def logs(self, name: str, offset: int = 0, *, rank: int = 0, wait_s: float = 0.0) -> LogChunk:
        params = {"offset": offset, "rank": rank, "wait_s": wait_s}
        response, chunk = self._log_chunk(f"/v1/clusters/{name}/logs", params, wait_s)
        return LogChunk(**chunk, cluster_status=response.headers["X-Gpulease-Cluster-Status"])

    def ssh_target(self, name: str, *, rank: int = 0) -> dict[str, Any]:
        """Host, port, user, key file and known-hosts file of node ``rank`` (SSH providers)."""
        return self._http.json("GET", f"/v1/clusters/{name}/ssh", params={"rank": rank})

    def exec(
        self, name: str, command: str, *, rank: int = 0, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        body = {"command": command, "rank": rank, "timeout_s": timeout_s}
        return self._http.json(
            "POST", f"/v1/clusters/{name}/exec", json=body, timeout=timeout_s + 30.0
        )

    def budgets(self) -> list[dict[str, Any]]:
        """The server's ``budgets:`` with their period's spend (``gpulease status``)."""
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/budgets")["budgets"]
        return found

    # ---- managed jobs -----------------------------------------------------------------------

    def job_launch(
        self,
        task: Task | Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        envs: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        over_budget: bool = False,
    ) -> dict[str, Any]:
        """Launch a managed job: it is recovered after preemptions and failures until it ends.
        ``task``, local paths, ``envs``, ``environ``, ``secrets`` and ``over_budget`` as in
        :meth:`launch`."""
        return post_task(self._http, "/v1/jobs", task, workdir=workdir, envs=envs,
                         environ=environ, secrets=secrets, name=name,
                         over_budget=over_budget or None)  # fmt: skip

    def jobs(self, *, all_jobs: bool = True) -> list[dict[str, Any]]:
        params = {"all": "true" if all_jobs else "false"}
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/jobs", params=params)["jobs"]
        return found

    def job(self, job_id: int, *, history: bool = False) -> dict[str, Any]:
        params = {"history": "true"} if history else None
        return self._http.json("GET", f"/v1/jobs/{job_id}", params=params)

    def job_cancel(self, job_id: int) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/jobs/{job_id}/cancel")

    def job_logs(
        self, job_id: int, offset: int = 0, *, attempt: int | None = None, wait_s: float = 0.0
    ) -> JobLogChunk:
        params: dict[str, Any] = {"offset": offset, "wait_s": wait_s}
        if attempt is not None:
            params["attempt"] = attempt
        response, chunk = self._log_chunk(f"/v1/jobs/{job_id}/logs", params, wait_s)
        headers = response.headers
        return JobLogChunk(
            **chunk,
            job_status=headers["X-Gpulease-Job-Status"],
            attempt=int(headers["X-Gpulease-Job-Attempt"]),
        )

    def dashboard_login(self) -> dict[str, Any]:
        """A one-time login link for the web dashboard: ``{"url", "expires_at", "ttl_s"}``. The
        URL carries a secret that works once, shortly: hand it to a browser, do not log it."""
        return self._http.json("POST", "/v1/dashboard/login")

    # ---- telemetry (relayed from the agents) -------------------------------------------------

    def telemetry(
        self, name: str, since: float | None = None, resolution: int | None = None
    ) -> dict[str, Any]:
        """The cluster's stored telemetry points per node from ``since`` (Unix s; default an
        hour ago) at ``resolution`` seconds (10 or 60; default 10 when the 10 s points reach
        back that far)."""
        params = _window(since, resolution)
        return self._http.json("GET", f"/v1/clusters/{name}/telemetry", params=params)

    def job_telemetry(
        self, job_id: int, since: float | None = None, resolution: int | None = None
    ) -> dict[str, Any]:
        """The same for a managed job: the points of all its attempt clusters."""
        params = _window(since, resolution)
        return self._http.json("GET", f"/v1/jobs/{job_id}/telemetry", params=params)

    def telemetry_latest(self, cluster: str | None = None) -> dict[str, Any]:
        """Every live cluster's (or one's) nodes' newest raw samples."""
        params = None if cluster is None else {"cluster": cluster}
        return self._http.json("GET", "/v1/telemetry/latest", params=params)

    # ---- cost ---------------------------------------------------------------------------------

    def cost(
        self, since: str | None = None, month: str | None = None, by: str | None = None
    ) -> dict[str, Any]:
        """The cost report from the ledger (docs/cost-report.md): over the last ``since``
        (``30d``, the default) or the UTC ``month`` (``2026-11``), broken down ``by`` day
        (default), cluster, job, task, provider, region, gpu, pricing or user."""
        given = {"since": since, "month": month, "by": by}
        params = {k: v for k, v in given.items() if v is not None}
        return self._http.json("GET", "/v1/cost", params=params or None)

    def sla(self, month: str | None = None) -> dict[str, Any]:
        """The month's (``YYYY-MM``; default this month) availability per provider and region
        against the config's promise, the breaches and the credit owed (docs/cost-sla.md)."""
        params = None if month is None else {"month": month}
        return self._http.json("GET", "/v1/sla", params=params)

    def providers(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/providers")["providers"]
        return found

    def shutdown(self) -> None:
        self._http.json("POST", "/v1/server/shutdown")

    def audit(self, since: str | None = None) -> dict[str, Any]:
        """The quarterly audit over ``since`` (a duration: ``90d`` by default): findings
        ranked by dollars, each with its evidence and action (docs/cost-audit.md)."""
        params = None if since is None else {"since": since}
        return self._http.json("GET", "/v1/audit", params=params)

    # ---- plumbing ---------------------------------------------------------------------------

    def _log_chunk(
        self, path: str, params: dict[str, Any], wait_s: float
    ) -> tuple[httpx.Response, dict[str, Any]]:
        """A long-polled piece of output: the response and the fields every log chunk has."""
        response = self._http.request("GET", path, params=params, timeout=wait_s + 30.0)
        headers = response.headers
        return response, {
            "data": response.content,
            "next_offset": int(headers["X-Gpulease-Next-Offset"]),
            "complete": headers["X-Gpulease-Log-Complete"] == "true",
            "task_state": headers["X-Gpulease-Task-State"],
        }


def _window(since: float | None, resolution: int | None) -> dict[str, Any] | None:
    params: dict[str, Any] = {}
    if since is not None:
        params["since"] = repr(float(since))
    if resolution is not None:
        params["resolution"] = resolution
    return params or None
