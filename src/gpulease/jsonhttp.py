"""JSON over HTTP with typed errors: the one client under the server's agent client
(:mod:`gpulease.agent.client`) and the SDK (:mod:`gpulease.client.http`).

:class:`JsonHttp` holds one ``httpx.Client`` (base URL, bearer token, timeout). ``request``
sends and returns the response, ``json`` its JSON object; ``extra_timeout`` adds seconds to one
call's timeout (a call that waits for a command or an upload). Failures are classified by
status code, never by message text::

    GpuleaseError
    ├── Permanent
    │   └── HttpRefused          4xx: ``status``, ``code``, ``message`` (from the body)
    │       └── HttpUnauthorized 401: wrong or missing token
    └── Retryable
        └── HttpUnavailable      no answer (refused, reset, timed out) or a 5xx

``code`` and ``message`` come from an ``{"error": {"code": ..., "message": ...}}`` body; any
other body gives ``code="unknown"`` and the start of the text. A client with its own error
classes subclasses :class:`JsonHttp` and sets ``refused`` / ``unauthorized`` / ``unavailable``
(subclasses of the ones above) and ``peer`` (its name in messages), or overrides
:meth:`JsonHttp.error_for` for another mapping. The token is only ever put in the Authorization
header. A base module: imports httpx and :mod:`gpulease.errors` only. Moves no states.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from gpulease.errors import Permanent, Retryable

_TEXT_KEPT = 300  # characters of a body that is not our error shape, in the message


class HttpRefused(Permanent):
    """The peer refused the request (a 4xx answer)."""

    peer: ClassVar[str] = "the server"

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{self.peer} refused ({status} {code}): {message}")
        self.status = status
        self.code = code
        self.message = message


class HttpUnauthorized(HttpRefused):
    """401: the token is wrong or missing."""


class HttpUnavailable(Retryable):
    """No answer (connection refused or reset, timeout) or a 5xx: worth trying again."""


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """What an error answer said: its status, and the code and message of its body."""

    status: int
    code: str
    message: str


def error_answer(response: httpx.Response) -> ErrorAnswer:
    """``response``'s status with the ``{"error": {"code", "message"}}`` of its body, falling
    back to ``code="unknown"`` and the body's text (or the reason phrase when it is empty)."""
    try:
        error = response.json()["error"]
        message = str(error["message"])
        return ErrorAnswer(response.status_code, str(error.get("code", "unknown")), message)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = response.text[:_TEXT_KEPT] or response.reason_phrase
        return ErrorAnswer(response.status_code, "unknown", text)


class JsonHttp:
    """One peer's HTTP API: requests with the token, answers or typed errors."""

    peer: ClassVar[str] = "the server"
    refused: ClassVar[type[HttpRefused]] = HttpRefused
    unauthorized: ClassVar[type[HttpRefused]] = HttpUnauthorized
    unavailable: ClassVar[type[Retryable]] = HttpUnavailable

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        self.url = base_url
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        self.http = httpx.Client(
            base_url=base_url, timeout=timeout, transport=transport, verify=verify, headers=headers
        )

    def close(self) -> None:
        self.http.close()

    def request(
        self, method: str, path: str, *, extra_timeout: float = 0.0, **kw: Any
    ) -> httpx.Response:
        """Send; the response of a 1xx-3xx answer, else the error :meth:`error_for` gives.
        ``extra_timeout`` seconds are added to the client's read timeout for this call;
        ``kw`` go to ``httpx.Client.request`` (``json``, ``params``, ``content``, ``timeout``)."""
        if extra_timeout:
            kw["timeout"] = httpx.Timeout((self.http.timeout.read or 5.0) + extra_timeout)
        try:
            response = self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise self.unreachable(exc) from None
        if response.status_code >= 400:
            raise self.error_for(error_answer(response))
        return response

    def json(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        """:meth:`request`, and the answer's JSON object."""
        data: dict[str, Any] = self.request(method, path, **kw).json()
        return data

    def unreachable(self, exc: httpx.TransportError) -> Exception:
        """The error for a request that got no answer."""
        return self.unavailable(f"{self.peer} at {self.url} did not answer: {exc}")

    def error_for(self, answer: ErrorAnswer) -> Exception:
        """The error for a 4xx/5xx answer: 5xx unavailable, 401 unauthorized, else refused."""
        if answer.status >= 500:
            return self.unavailable(f"{self.peer} error {answer.status}: {answer.message}")
        if answer.status == 401:
            return self.unauthorized(answer.status, answer.code, answer.message)
        return self.refused(answer.status, answer.code, answer.message)
