"""The server's side of the agent API: a small typed client over httpx.

Errors, classified by status code (never by message text)::

    GpuleaseError
    ├── Permanent
    │   └── AgentRequestError      the agent refused the request (4xx); ``status``, ``code``
    │       └── AgentUnauthorized  401: wrong or missing token
    └── Retryable
        └── AgentUnavailable       no answer (connection refused, timeout) or a 5xx

The token is held as a :class:`pydantic.SecretStr` and only ever put in the Authorization
header.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from typing import IO, Any

import httpx
from pydantic import SecretStr

from gpulease.errors import Permanent, Retryable
from gpulease.wire import ExecResult, LogChunk, NodeTask, TaskState


class AgentRequestError(Permanent):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"agent refused ({status} {code}): {message}")
        self.status = status
        self.code = code


class AgentUnauthorized(AgentRequestError):
    pass


class AgentUnavailable(Retryable):
    pass


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
        self._http = httpx.Client(
            base_url=base_url,
            timeout=timeout,
            transport=transport,
            verify=shared_ssl_context(),
            headers={"Authorization": f"Bearer {secret.get_secret_value()}"},
        )

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/v1/health")

    def submit(self, task: NodeTask) -> dict[str, Any]:
        return self._json("POST", "/v1/tasks", json=task.wire())

    def status(self, task_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/tasks/{task_id}")

    def tasks(self) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = self._json("GET", "/v1/tasks")["tasks"]
        return tasks

    def logs(self, task_id: str, offset: int = 0, limit: int | None = None) -> LogChunk:
        params = {"offset": offset} if limit is None else {"offset": offset, "limit": limit}
        response = self._request("GET", f"/v1/tasks/{task_id}/logs", params=params)
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
        return self._json("POST", f"/v1/tasks/{task_id}/preempt", json={"grace_s": grace_s})

    def cancel(self, task_id: str, grace_s: float = 10.0) -> dict[str, Any]:
        return self._json("POST", f"/v1/tasks/{task_id}/cancel", json={"grace_s": grace_s})

    def exec(self, task_id: str, command: str, timeout_s: float = 30.0) -> ExecResult:
        body = {"command": command, "timeout_s": timeout_s}
        data = self._json("POST", f"/v1/tasks/{task_id}/exec", json=body, extra=timeout_s)
        return ExecResult.from_json(data)

    def file_manifest(self, bundle: str) -> dict[str, Any]:
        """``GET /v1/files/<bundle>``: ``{bundle, path, manifest, max_upload_bytes}``."""
        return self._json("GET", f"/v1/files/{bundle}", extra=UPLOAD_READ_S)

    def put_files(self, bundle: str, body: IO[bytes], size: int) -> dict[str, Any]:
        """``PUT /v1/files/<bundle>`` with the ``size`` bytes of ``body`` (a sync stream from
        :func:`gpulease.filesync.pack`), streamed; the agent's answer once it applied them."""
        headers = {"Content-Length": str(size), "Content-Type": "application/x-tar"}
        return self._json("PUT", f"/v1/files/{bundle}", content=_chunks(body, size),
                          headers=headers, extra=UPLOAD_READ_S)  # fmt: skip

    def shutdown(self, *, cancel_task: bool = False, grace_s: float = 10.0) -> None:
        self._json("POST", "/v1/shutdown", json={"cancel_task": cancel_task, "grace_s": grace_s})

    def _json(self, method: str, path: str, *, extra: float = 0.0, **kw: Any) -> dict[str, Any]:
        data: dict[str, Any] = self._request(method, path, extra=extra, **kw).json()
        return data

    def _request(self, method: str, path: str, *, extra: float = 0.0, **kw: Any) -> httpx.Response:
        """Send; ``extra`` seconds are added to the read timeout (exec waits for its command)."""
        if extra:
            kw["timeout"] = httpx.Timeout((self._http.timeout.read or 5.0) + extra)
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            url = self._http.base_url
            raise AgentUnavailable(f"agent at {url} did not answer: {exc}") from None
        if response.status_code >= 500:
            raise AgentUnavailable(f"agent error {response.status_code}")
        if response.status_code >= 400:
            raise _refusal(response)
        return response


UPLOAD_READ_S = 300.0  # an upload's answer comes once the node wrote (or hashed) every file


def _chunks(body: IO[bytes], size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        chunk = body.read(min(left, 1 << 20))
        if not chunk:
            raise OSError("the upload body ended early")
        left -= len(chunk)
        yield chunk


def _refusal(response: httpx.Response) -> AgentRequestError:
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "unknown", response.text[:200]
    cls = AgentUnauthorized if response.status_code == 401 else AgentRequestError
    return cls(response.status_code, code, message)
