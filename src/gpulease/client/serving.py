"""The SDK's service methods (``gpulease serve``): one per ``/v1/services`` route, mixed into
:class:`~gpulease.client.Client`. Views are the server's JSON (dicts). Moves no states itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from gpulease.client.tasks import post_task
from gpulease.jsonhttp import JsonHttp

if TYPE_CHECKING:
    from gpulease.spec import Task


@dataclass(frozen=True, slots=True)
class ServiceLogChunk:
    """A piece of one replica's output (``replica``: its number; None: none launched yet)."""

    data: bytes
    next_offset: int
    complete: bool
    task_state: str
    service_status: str
    replica: int | None


class ServingMixin:
    _http: JsonHttp

    def serve_up(
        self,
        task: Task | Mapping[str, Any],
        *,
        name: str | None = None,
        workdir: str | None = None,
        envs: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Start a service (a task with a ``service:`` section): replicas behind an endpoint on
        the server's host. ``task``, local paths, ``envs``, ``environ`` and ``secrets`` as in
        ``launch``."""
        return post_task(self._http, "/v1/services", task, workdir=workdir, envs=envs,
                         environ=environ, secrets=secrets, name=name)  # fmt: skip

    def serve_list(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._http.json("GET", "/v1/services")["services"]
        return found

    def serve_status(self, name: str) -> dict[str, Any]:
        """The service: endpoint, replicas, load, cost and scaling decisions."""
        return self._http.json("GET", f"/v1/services/{name}")

    def serve_load(self, name: str, since: float | None = None) -> dict[str, Any]:
        """The service's recent load, one point per telemetry interval over the last hour
        (``{"name", "step_s", "points"}``; ``since``: server time of the first point wanted)."""
        params = {} if since is None else {"since": since}
        response = self._http.request("GET", f"/v1/services/{name}/load", params=params)
        found: dict[str, Any] = response.json()
        return found

    def serve_update(
        self,
        name: str,
        task: Task | Mapping[str, Any],
        *,
        workdir: str | None = None,
        envs: Mapping[str, str] | None = None,
        environ: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Roll the service to a new task (version + 1): new replicas become ready before old
        ones drain. ``envs``, ``environ`` and ``secrets`` as in ``launch``."""
        return post_task(self._http, f"/v1/services/{name}/update", task, workdir=workdir,
                         envs=envs, environ=environ, secrets=secrets)  # fmt: skip

    def serve_down(self, name: str) -> dict[str, Any]:
        """Drain and terminate every replica, then close the endpoint."""
        return self._http.json("DELETE", f"/v1/services/{name}")

    def serve_logs(
        self, name: str, offset: int = 0, *, replica: int | None = None, wait_s: float = 0.0
    ) -> ServiceLogChunk:
        params: dict[str, Any] = {"offset": offset, "wait_s": wait_s}
        if replica is not None:
            params["replica"] = replica
        response: httpx.Response = self._http.request(
            "GET", f"/v1/services/{name}/logs", params=params, timeout=wait_s + 30.0
        )
        headers = response.headers
        index = headers.get("X-Gpulease-Replica", "")
        return ServiceLogChunk(
            data=response.content,
            next_offset=int(headers["X-Gpulease-Next-Offset"]),
            complete=headers["X-Gpulease-Log-Complete"] == "true",
            task_state=headers["X-Gpulease-Task-State"],
            service_status=headers["X-Gpulease-Service-Status"],
            replica=int(index) if index.isdigit() else None,
        )
