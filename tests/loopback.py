"""A tiny HTTP server on 127.0.0.1 for tests that need a real peer (a fake slurmrestd, a server
that answers with chosen statuses): :func:`serving` runs a handler class in a thread, :func:`send`
answers a request with JSON (or bytes)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[Any]:
    """A threading HTTP server on a free loopback port; stopped and closed on exit."""
    httpd: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def send(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    body: object,
    kind: str = "application/json",
) -> None:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
