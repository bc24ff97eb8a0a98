"""The server's side of the agent API: a small typed client over :mod:`gpulease.jsonhttp`.

Errors, classified by status code (never by message text)::

    GpuleaseError
    ├── Permanent
    │   └── AgentRequestError      the agent refused the request (4xx); ``status``, ``code``
    │       └── AgentUnauthorized  401: wrong or missing token
    └── Retryable
        └── AgentUnavailable       no answer (connection refused, timeout) or a 5xx

(subclasses of :class:`~gpulease.jsonhttp.HttpRefused`, ``HttpUnauthorized`` and
``HttpUnavailable``). The token is held as a :class:`pydantic.SecretStr` and only ever put in
the Authorization header; a task's secret values (``submit``) and a registry password only in
a request body.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator, Mapping
from typing import IO, Any

import httpx
from pydantic import SecretStr

from gpulease.jsonhttp import HttpRefused, HttpUnauthorized, HttpUnavailable, JsonHttp
from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState


class AgentRequestError(HttpRefused):
    peer = "agent"


class AgentUnauthorized(AgentRequestError, HttpUnauthorized):
    pass


class AgentUnavailable(HttpUnavailable):
    pass


class _AgentHttp(JsonHttp):
    peer = "agent"
    refused = AgentRequestError
    unauthorized = AgentUnauthorized
    unavailable = AgentUnavailable


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every agent client: httpx otherwise loads the CA bundle per client
    (~0.9 MB each), which a server polling hundreds of nodes pays for every one of them."""
    return ssl.create_default_context()


class AgentClient:
    def __init__(
        self,
        base_url: str,
        token: SecretStr | str,
        *,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        secret = token if isinstance(token, SecretStr) else SecretStr(token)
        self._http = _AgentHttp(
            base_url,
            token=secret.get_secret_value(),
            timeout=timeout,
            transport=transport,
            verify=shared_ssl_context(),
        )

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> dict[str, Any]:
        return self._http.json("GET", "/v1/health")

    def metrics(self, since: float | None = None) -> dict[str, Any]:
        """The node's buffered telemetry samples taken after ``since``, newest last."""
        path = "/v1/metrics" if since is None else f"/v1/metrics?since={since!r}"
        return self._http.json("GET", path)

    def submit(
        self, task: NodeTask, secrets: Mapping[str, SecretStr] | None = None
    ) -> dict[str, Any]:
        """``POST /v1/tasks``; ``secrets``: the values of ``task.secret_set``, sent in the
        body's ``secrets`` field beside the task (never inside it), nowhere else."""
        body = task.wire()
        if secrets is not None:
            body["secrets"] = {name: value.get_secret_value() for name, value in secrets.items()}
        return self._http.json("POST", "/v1/tasks", json=body)

    def set_registry_login(self, registry: str, username: str, password: SecretStr) -> None:
        """``PUT /v1/registries/<registry>``: the node pulls that registry's images with this
        login (kept in the agent's memory only). The password goes in the body, nowhere else."""
        body = {"username": username, "password": password.get_secret_value()}
        self._http.json("PUT", f"/v1/registries/{registry}", json=body)

    def status(self, task_id: str) -> dict[str, Any]:
        return self._http.json("GET", f"/v1/tasks/{task_id}")

    def tasks(self) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = self._http.json("GET", "/v1/tasks")["tasks"]
        return tasks

    def logs(self, task_id: str, offset: int = 0, limit: int | None = None) -> LogChunk:
        params = {"offset": offset} if limit is None else {"offset": offset, "limit": limit}
        response = self._http.request("GET", f"/v1/tasks/{task_id}/logs", params=params)
        headers = response.headers
        return LogChunk(
            data=response.content,
            offset=int(headers.get("X-Gpulease-Offset", offset)),
            next_offset=int(headers["X-Gpulease-Next-Offset"]),
            complete=headers["X-Gpulease-Log-Complete"] == "true",
            state=TaskState(headers["X-Gpulease-Task-State"]),
            size=int(headers["X-Gpulease-Log-Size"]) if "X-Gpulease-Log-Size" in headers else None,
        )

    def preempt(self, task_id: str, grace_s: float = 30.0) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/tasks/{task_id}/preempt", json={"grace_s": grace_s})

    def cancel(self, task_id: str, grace_s: float = 10.0) -> dict[str, Any]:
        return self._http.json("POST", f"/v1/tasks/{task_id}/cancel", json={"grace_s": grace_s})

    def exec(self, task_id: str, command: str, timeout_s: float = 30.0) -> ExecResult:
        body = {"command": command, "timeout_s": timeout_s}
        data = self._http.json(
            "POST", f"/v1/tasks/{task_id}/exec", json=body, extra_timeout=timeout_s
        )
        return ExecResult.from_json(data)

    def file_manifest(self, bundle: str) -> dict[str, Any]:
        """``GET /v1/files/<bundle>``: ``{bundle, path, manifest, max_upload_bytes}``."""
        return self._http.json("GET", f"/v1/files/{bundle}", extra_timeout=UPLOAD_READ_S)

    def put_files(self, bundle: str, body: IO[bytes], size: int) -> dict[str, Any]:
        """``PUT /v1/files/<bundle>`` with the ``size`` bytes of ``body`` (a sync stream from
        :func:`gpulease.filesync.pack`), streamed; the agent's answer once it applied them."""
        headers = {"Content-Length": str(size), "Content-Type": "application/x-tar"}
        return self._http.json("PUT", f"/v1/files/{bundle}", content=_chunks(body, size),
                               headers=headers, extra_timeout=UPLOAD_READ_S)  # fmt: skip

    def profiles(self) -> dict[str, Any]:
        """``GET /v1/profile``: the ranks with a profile on the node (``gpulease.train``)."""
        return self._http.json("GET", "/v1/profile")

    def profile_file(self, rank: int, name: str) -> bytes:
        """``GET /v1/profile/rank-<rank>/<name>`` (``summary.json`` or ``trace.json.gz``)."""
        path = f"/v1/profile/rank-{rank}/{name}"
        return self._http.request("GET", path, extra_timeout=UPLOAD_READ_S).content

    def shutdown(self, *, cancel_task: bool = False, grace_s: float = 10.0) -> None:
        self._http.json(
            "POST", "/v1/shutdown", json={"cancel_task": cancel_task, "grace_s": grace_s}
        )


UPLOAD_READ_S = 300.0  # an upload's answer comes once the node wrote (or hashed) every file


def _chunks(body: IO[bytes], size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        chunk = body.read(min(left, 1 << 20))
        if not chunk:
            raise OSError("the upload body ended early")
        left -= len(chunk)
        yield chunk
