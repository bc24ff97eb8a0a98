"""gpulease.jsonhttp against a REAL HTTP server on a free loopback port: answers, the error
shapes it reads, the status → error mapping of the base class and of its two users (the
server's agent client, the SDK), transport failures, the per-call extra timeout, the token."""

from __future__ import annotations

import http.server
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gpulease.agent.client import (
    AgentClient,
    AgentRequestError,
    AgentUnauthorized,
    AgentUnavailable,
)
from gpulease.client import (
    Client,
    Conflict,
    InvalidRequest,
    NotFound,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from gpulease.errors import Permanent, Retryable, UserInputError
from gpulease.jsonhttp import HttpRefused, HttpUnauthorized, HttpUnavailable, JsonHttp
from tests.loopback import send, serving

TOKEN = "t0k-secret"
SLOW_S = 0.6  # the /slow answer's delay: well past SHORT_S, far below the extra timeout
SHORT_S = 0.2


class _Handler(http.server.BaseHTTPRequestHandler):
    """The last path part says what to answer: ``ok`` / ``health``, ``slow``, ``<status>`` (our
    error body), ``text-<status>`` (plain text), ``empty-<status>`` (no body); 401 without the
    token."""

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        last = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, {"error": {"code": "unauthorized", "message": "bad token"}})
        if last in ("ok", "health"):
            return self._send(200, {"ok": True, "method": self.command})
        if last == "slow":
            time.sleep(SLOW_S)
            return self._send(200, {"ok": True})
        kind, _, status = last.rpartition("-")
        if kind == "text":
            return self._send(int(status), b"plain words", "text/plain")
        if kind == "empty":
            return self._send(int(status), b"", "text/plain")
        return self._send(int(status), {"error": {"code": f"c{status}", "message": f"m{status}"}})

    def _send(self, status: int, body: object, kind: str = "application/json") -> None:
        send(self, status, body, kind)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()


@dataclass
class Server:
    url: str


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with serving(_Handler) as httpd:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there now: a connection is refused


def test_answers_and_their_json(server: Server) -> None:
    api = JsonHttp(server.url, token=TOKEN, timeout=5.0)
    assert api.json("POST", "/v1/ok") == {"ok": True, "method": "POST"}
    assert api.request("GET", "/v1/ok").status_code == 200
    api.close()


@pytest.mark.parametrize(
    ("path", "status", "code", "message"),
    [
        ("/v1/404", 404, "c404", "m404"),
        ("/v1/409", 409, "c409", "m409"),
        ("/v1/text-422", 422, "unknown", "plain words"),  # not our error shape: the text
        ("/v1/empty-404", 404, "unknown", "Not Found"),  # no body: the reason phrase
    ],
)
def test_4xx_is_refused_with_status_code_and_message(
    server: Server, path: str, status: int, code: str, message: str
) -> None:
    api = JsonHttp(server.url, token=TOKEN)
    with pytest.raises(HttpRefused) as info:
        api.json("GET", path)
    assert isinstance(info.value, Permanent) and not isinstance(info.value, HttpUnauthorized)
    assert (info.value.status, info.value.code, info.value.message) == (status, code, message)


def test_401_is_unauthorized_and_the_token_is_never_in_a_message(server: Server) -> None:
    api = JsonHttp(server.url, token="wrong-token")
    with pytest.raises(HttpUnauthorized) as info:
        api.json("GET", "/v1/ok")
    assert info.value.status == 401 and "wrong-token" not in str(info.value)


@pytest.mark.parametrize("path", ["/v1/500", "/v1/503", "/v1/text-502"])
def test_5xx_is_unavailable(server: Server, path: str) -> None:
    with pytest.raises(HttpUnavailable) as info:
        JsonHttp(server.url, token=TOKEN).json("GET", path)
    assert isinstance(info.value, Retryable) and "error 5" in str(info.value)


def test_no_answer_is_unavailable() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(HttpUnavailable, match="did not answer"):
        JsonHttp(url, token=TOKEN, timeout=5.0).json("GET", "/v1/ok")


def test_a_timeout_is_unavailable_and_extra_timeout_waits_longer(server: Server) -> None:
    api = JsonHttp(server.url, token=TOKEN, timeout=SHORT_S)
    with pytest.raises(HttpUnavailable, match="did not answer"):
        api.json("GET", "/v1/slow")
    assert api.json("GET", "/v1/slow", extra_timeout=30.0) == {"ok": True}


def test_the_agent_client_maps_to_its_own_errors(server: Server) -> None:
    with AgentClient(server.url, TOKEN, timeout=5.0) as agent:
        assert agent.health() == {"ok": True, "method": "GET"}
        with pytest.raises(AgentRequestError) as refused:
            agent.status("404")
        assert (refused.value.status, refused.value.code) == (404, "c404")
        assert str(refused.value) == "agent refused (404 c404): m404"
        with pytest.raises(AgentUnavailable):
            agent.status("500")
    with (
        AgentClient(server.url, "wrong", timeout=5.0) as agent,
        pytest.raises(AgentUnauthorized) as denied,
    ):
        agent.status("ok")
    assert isinstance(denied.value, AgentRequestError)
    assert isinstance(denied.value, HttpUnauthorized)
    with pytest.raises(AgentUnavailable, match="agent at"):
        AgentClient(f"http://127.0.0.1:{_closed_port()}", TOKEN).health()


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("404", NotFound),
        ("409", Conflict),
        ("422", InvalidRequest),
        ("400", InvalidRequest),
        ("403", ServerError),
        ("500", ServerError),
        ("text-500", ServerError),
        ("503", ServerUnavailable),
    ],
)
def test_the_sdk_keeps_its_mapping(server: Server, name: str, error: type[Exception]) -> None:
    with Client(server.url, TOKEN) as client, pytest.raises(error) as info:
        client.cluster(name)
    body_message = "plain words" if name.startswith("text") else f"m{name}"
    assert body_message in str(info.value)


def test_sdk_errors_keep_their_families(server: Server) -> None:
    with Client(server.url, "wrong") as client, pytest.raises(Unauthorized) as denied:
        client.health()
    assert isinstance(denied.value, ServerError) and "refused the token" in str(denied.value)
    with Client(server.url, TOKEN) as client, pytest.raises(UserInputError):
        client.cluster("404")
    url = f"http://127.0.0.1:{_closed_port()}"
    with Client(url, TOKEN) as client, pytest.raises(ServerUnavailable, match="gpulease server"):
        client.health()
