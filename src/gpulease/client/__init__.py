"""gpulease.client: the Python SDK over the server's REST API.

``connect()`` finds (or starts) this home's server and returns a :class:`Client`; every method
is one API route. Errors are in :mod:`gpulease.client.errors`. Imports only ``gpulease.spec``
and the base modules of gpulease (layering): it talks to the server over HTTP only.
"""

from gpulease.client.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    ServerError,
    ServerUnavailable,
    Unauthorized,
)
from gpulease.client.http import Client, JobLogChunk, LogChunk
from gpulease.client.server import ServerInfo, connect, read_info, running, stop
from gpulease.client.serving import ServiceLogChunk

__all__ = [
    "Client",
    "Conflict",
    "InvalidRequest",
    "JobLogChunk",
    "LogChunk",
    "NotFound",
    "ServerError",
    "ServerInfo",
    "ServerUnavailable",
    "ServiceLogChunk",
    "Unauthorized",
    "connect",
    "read_info",
    "running",
    "stop",
]
