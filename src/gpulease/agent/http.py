"""The agent's HTTP API (``/v1``) on the standard library's threading HTTP server.

Why not FastAPI + uvicorn: importing them takes ~0.35 s of a warm start (seconds on a cold
disk), the stdlib server ~0.05 s, and the agent must answer well under a second after it starts
(the local provider starts several at once on small machines). The API is small enough that a
route table is clearer than a framework.

Every request needs ``Authorization: Bearer <node token>`` (compared with
``hmac.compare_digest``), even for unknown paths, so nothing is learned without it. The token is
never logged; the access log records method, path and status only. Errors are JSON:
``{"error": {"code": "...", "message": "..."}}``.

Bodies are read whole (at most 1 MiB) except an upload's (``PUT /v1/files/<bundle>``), which is
streamed into the staging dir, bounded by its ``Content-Length`` and the node's upload limit; a
refused upload's body is read to its end first, so the client sees the answer.

``PUT /v1/registries/<host>`` hands the agent a registry login (:meth:`Agent.set_registry_login`):
kept in memory only, its password never in an answer, a log line or an error message (a body
that does not validate is refused without its values). The same holds for the ``secrets`` of
``POST /v1/tasks`` (:meth:`Request.submission`, :mod:`gpulease.agent.task_secrets`).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, SecretStr, ValidationError

from gpulease.agent import profiles
from gpulease.agent.api import (
    ExecRequest,
    RegistryLogin,
    ShutdownRequest,
    StopRequest,
    SubmittedSecrets,
)
from gpulease.agent.containers import RegistryCredentials
from gpulease.agent.service import DEFAULT_LOG_CHUNK, Agent, AgentError
from gpulease.agent.staging import BUNDLE_PATTERN
from gpulease.wire import NodeTask

if TYPE_CHECKING:
    from gpulease.filesync import Readable

log = logging.getLogger("gpulease.agent.http")

MAX_BODY = 1 << 20
M = TypeVar("M", bound=BaseModel)
_TASK = r"/v1/tasks/(?P<task_id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})"
_FILES = rf"/v1/files/(?P<bundle>{BUNDLE_PATTERN})"
_REGISTRY = (  # a registry host, with its port (as registry_of names it)
    r"/v1/registries/(?P<registry>[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?(?::[0-9]{1,5})?)"
)
_PROFILE = r"/v1/profile/rank-(?P<rank>0|[1-9][0-9]{0,5})/(?P<file>summary\.json|trace\.json\.gz)"


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, data: Any) -> Response:
    return Response(status, json.dumps(data).encode())


@dataclass(frozen=True, slots=True)
class Request:
    agent: Agent
    params: dict[str, str]
    query: dict[str, list[str]]
    body: bytes
    stream: Readable | None = None  # the body of a streaming route, unread

    def model(self, cls: type[M]) -> M:
        try:
            return cls.model_validate_json(self.body or b"{}")
        except ValidationError as exc:
            raise _invalid(exc) from None

    def submission(self) -> tuple[NodeTask, dict[str, SecretStr] | None]:
        """The task of a ``POST /v1/tasks`` body, validated without its ``secrets`` (so the
        task, its digest and its record never hold them), and those secrets (None: none)."""
        try:
            data = json.loads(self.body or b"{}")
        except ValueError:  # its message is not passed on: no part of the body is ever shown
            raise AgentError(422, "invalid_request", "body: not valid JSON") from None
        if not isinstance(data, dict):
            raise AgentError(422, "invalid_request", "body: expected a JSON object")
        values = data.pop("secrets", None)
        try:
            sub = NodeTask.model_validate(data)
            if values is None:
                return sub, None
            return sub, SubmittedSecrets.model_validate({"secrets": values}).secrets
        except ValidationError as exc:
            raise _invalid(exc) from None

    def int_query(self, name: str, default: int) -> int:
        values = self.query.get(name)
        try:
            return int(values[0]) if values else default
        except ValueError:
            raise AgentError(422, "invalid_request", f"{name} must be an integer") from None


def _invalid(exc: ValidationError) -> AgentError:
    """A 422 naming each bad field and what is wrong with it, never the value given."""
    problems = [
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
        for e in exc.errors(include_input=False, include_url=False)
    ]
    return AgentError(422, "invalid_request", "; ".join(problems))


def _health(req: Request) -> Response:
    return json_response(200, req.agent.health())


def _submit(req: Request) -> Response:
    created, status = req.agent.submit(*req.submission())
    return json_response(201 if created else 200, status)


def _list(req: Request) -> Response:
    return json_response(200, {"tasks": req.agent.list_tasks()})


def _status(req: Request) -> Response:
    return json_response(200, req.agent.status(req.params["task_id"]))


def _logs(req: Request) -> Response:
    chunk = req.agent.logs(
        req.params["task_id"], req.int_query("offset", 0), req.int_query("limit", DEFAULT_LOG_CHUNK)
    )
    headers = {
        "X-Gpulease-Offset": str(chunk.offset),
        "X-Gpulease-Next-Offset": str(chunk.next_offset),
        "X-Gpulease-Log-Size": str(chunk.size),
        "X-Gpulease-Log-Complete": "true" if chunk.complete else "false",
        "X-Gpulease-Task-State": chunk.state.value,
    }
    return Response(200, chunk.data, "application/octet-stream", headers)


def _stopper(kind: str) -> Callable[[Request], Response]:
    def handler(req: Request) -> Response:
        body = req.model(StopRequest)
        return json_response(202, req.agent.stop_task(req.params["task_id"], kind, body.grace_s))

    return handler


def _exec(req: Request) -> Response:
    result = req.agent.exec(req.params["task_id"], req.model(ExecRequest))
    return json_response(200, asdict(result))


def _registry_login(req: Request) -> Response:
    body = req.model(RegistryLogin)
    registry = req.params["registry"].lower()
    login = RegistryCredentials(registry, body.username, body.password.get_secret_value())
    req.agent.set_registry_login(login)
    return json_response(200, {"registry": registry, "username": body.username})


def _file_manifest(req: Request) -> Response:
    return json_response(200, req.agent.file_manifest(req.params["bundle"]))


def _put_files(req: Request) -> Response:
    assert req.stream is not None
    return json_response(200, req.agent.put_files(req.params["bundle"], req.stream))


def _metrics(req: Request) -> Response:
    values = req.query.get("since")
    since = None
    if values:
        try:
            since = float(values[0])
        except ValueError:
            raise AgentError(422, "invalid_request", "since must be a number (seconds)") from None
        if not math.isfinite(since):
            raise AgentError(422, "invalid_request", "since must be a finite number") from None
    return json_response(200, req.agent.metrics(since))


def _profiles(req: Request) -> Response:
    return json_response(200, profiles.list_profiles(req.agent.work_dir))


def _profile_file(req: Request) -> Response:
    rank, name = int(req.params["rank"]), req.params["file"]
    try:
        data = profiles.read_profile_file(req.agent.work_dir, rank, name)
    except profiles.ProfileMissing as exc:
        raise AgentError(404, "no_profile", str(exc)) from None
    except profiles.ProfileTooLarge as exc:
        raise AgentError(413, "too_large", str(exc)) from None
    kind = "application/json" if name.endswith(".json") else "application/gzip"
    return Response(200, data, kind)


def _shutdown(req: Request) -> Response:
    body = req.model(ShutdownRequest)
    threading.Thread(
        target=req.agent.shutdown,
        kwargs={"cancel_task": body.cancel_task, "grace_s": body.grace_s},
        daemon=True,
    ).start()
    return json_response(202, {"shutting_down": True})


ROUTES: list[tuple[str, re.Pattern[str], Callable[[Request], Response]]] = [
    ("GET", re.compile(r"/v1/health"), _health),
    ("GET", re.compile(r"/v1/tasks"), _list),
    ("POST", re.compile(r"/v1/tasks"), _submit),
    ("GET", re.compile(_TASK), _status),
    ("GET", re.compile(_TASK + r"/logs"), _logs),
    ("POST", re.compile(_TASK + r"/preempt"), _stopper("preempt")),
    ("POST", re.compile(_TASK + r"/cancel"), _stopper("cancel")),
    ("POST", re.compile(_TASK + r"/exec"), _exec),
    ("POST", re.compile(r"/v1/shutdown"), _shutdown),
    ("GET", re.compile(r"/v1/metrics"), _metrics),
    ("GET", re.compile(_FILES), _file_manifest),
    ("PUT", re.compile(_FILES), _put_files),
    ("PUT", re.compile(_REGISTRY), _registry_login),
    ("GET", re.compile(r"/v1/profile"), _profiles),
    ("GET", re.compile(_PROFILE), _profile_file),
]
STREAMING = frozenset({_put_files})  # their body is handed over unread (Request.stream)


class _Body:
    """The next ``length`` bytes of a request, and not one more."""

    def __init__(self, rfile: Readable, length: int) -> None:
        self._rfile = rfile
        self.remaining = length

    def read(self, size: int = -1) -> bytes:
        if self.remaining <= 0:
            return b""
        size = self.remaining if size < 0 else min(size, self.remaining)
        data = self._rfile.read(size)
        self.remaining -= len(data)
        if not data:
            self.remaining = 0
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], agent: Agent, token: bytes) -> None:
        if not token:
            raise ValueError("the node token is empty")
        self.agent = agent
        self.token = token
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: AgentHTTPServer
    server_version = "gpulease-agent"
    timeout = 120  # seconds an idle keep-alive connection may hold its thread

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def _handle(self, method: str) -> None:
        self._stream: _Body | None = None
        try:
            response = self._route(method)
        except AgentError as exc:
            response = json_response(
                exc.status, {"error": {"code": exc.code, "message": exc.message}}
            )
        except Exception:
            log.exception("%s %s failed", method, urlsplit(self.path).path)
            response = json_response(500, {"error": {"code": "internal", "message": "agent error"}})
        if self._stream is not None:  # let the client finish sending, so it reads the answer
            self.close_connection = True
            self._stream.drain()
        self._send(response)

    def _route(self, method: str) -> Response:
        if not self._authorised():
            self.close_connection = True
            raise AgentError(401, "unauthorized", "a valid bearer token is required")
        url = urlsplit(self.path)
        allowed = False
        for route_method, pattern, handler in ROUTES:
            match = pattern.fullmatch(url.path)
            if match is None:
                continue
            allowed = True
            if route_method == method:
                stream = self._open_stream() if handler in STREAMING else None
                body = b"" if stream is not None else self._read_body()
                query = parse_qs(url.query)
                return handler(Request(self.server.agent, match.groupdict(), query, body, stream))
        self._read_body()
        if allowed:
            raise AgentError(405, "method_not_allowed", f"{method} is not allowed here")
        raise AgentError(404, "not_found", "no such endpoint")

    def _authorised(self) -> bool:
        header = self.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode(), self.server.token)

    def _length(self) -> int:
        try:
            return int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise AgentError(400, "bad_request", "Content-Length is not a number") from None

    def _open_stream(self) -> _Body:
        if "Content-Length" not in self.headers:
            self.close_connection = True
            raise AgentError(411, "length_required", "an upload needs a Content-Length")
        length = self._length()
        limit = self.server.agent.staging.max_upload_bytes
        if length > limit:
            self.close_connection = True
            raise AgentError(413, "too_large", f"uploads to this node are limited to {limit} "
                             "bytes (agent serve --max-upload-mb)")  # fmt: skip
        self._stream = _Body(self.rfile, length)
        return self._stream

    def _read_body(self) -> bytes:
        length = self._length()
        if length > MAX_BODY:
            self.close_connection = True
            raise AgentError(413, "too_large", f"request bodies are limited to {MAX_BODY} bytes")
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, response: Response) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        if response.status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log.info("%s %s %s", self.command, urlsplit(self.path).path, code)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)
