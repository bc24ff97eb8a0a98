"""Errors the SDK raises, classified by HTTP status (never by message text)::

GpuleaseError
├── UserInputError
│   ├── InvalidRequest     422: bad input (a task field, an argument)
│   ├── NotFound           404: no such cluster
│   └── Conflict           409: the name is taken, or the cluster's status forbids it
├── Permanent
│   └── ServerError        500 or another unexpected answer; 401 (``Unauthorized``)
└── Retryable
    └── ServerUnavailable  no answer, or 503
"""

from __future__ import annotations

from gpulease.errors import Permanent, Retryable, UserInputError


class InvalidRequest(UserInputError):
    pass


class NotFound(UserInputError):
    pass


class Conflict(UserInputError):
    pass


class ServerError(Permanent):
    pass


class Unauthorized(ServerError):
    pass


class ServerUnavailable(Retryable):
    pass


def error_for(status: int, message: str) -> Exception:
    if status == 404:
        return NotFound(message)
    if status == 409:
        return Conflict(message)
    if status in (400, 422):
        return InvalidRequest(message)
    if status == 401:
        return Unauthorized(f"the server refused the token: {message}")
    if status == 503:
        return ServerUnavailable(message)
    return ServerError(f"server error {status}: {message}")
