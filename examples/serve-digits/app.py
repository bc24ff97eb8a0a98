"""serve-digits: the digits MLP of examples/train/train_digits.py, exported to ONNX, served over
HTTP with onnxruntime — the replica of examples/serve-digits/service.yaml.

Standard library HTTP (``ThreadingHTTPServer``, HTTP/1.1 keep-alive, Content-Length and chunked
request bodies) plus numpy and onnxruntime, so a replica's setup installs only onnxruntime.

- ``POST /predict`` with ``{"inputs": [[64 floats in 0..1], ...]}`` (8×8 images, pixel / 16, as
  train_digits.py feeds them) → ``{"predictions": [digit, ...], "probabilities": [[10], ...]}``;
  a bad body is 400 with a message naming the field.
- ``GET /health`` → 200 once the model is loaded, 503 while it loads and while draining.

The model moves loading → ready (or failed: exit 2); the server moves serving → draining (SIGTERM
or SIGINT: /health answers 503, no new connections, requests in flight finish, then exit 0).

Environment: ``PORT`` (default 8080), ``BIND_HOST`` (default 127.0.0.1), ``MODEL`` (default
``model.onnx`` beside this file), ``MODEL_WAIT_S`` (wait that long for the model file to appear,
default 0), ``PREDICT_DELAY_S`` (extra seconds per request: stands in for a bigger model in load
tests, default 0), ``ORT_THREADS`` (onnxruntime intra-op threads, default 1), ``DRAIN_TIMEOUT_S``
(default 30), ``ACCESS_LOG`` (1: one line per request on stderr).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import numpy as np

FEATURES = 64
MAX_BATCH = 1024
MAX_BODY_BYTES = 8 << 20


class BadRequest(Exception):
    """A request the app refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST) -> None:
        super().__init__(message)
        self.status = status


def fail(message: str) -> NoReturn:
    """Bad configuration: one line on stderr, exit 2."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        fail(f"${name}={raw!r}: expected a number >= 0")
    return value


class Model:
    """The onnxruntime session. ``state``: loading → ready, or loading → failed (``error``)."""

    def __init__(self, path: Path, wait_s: float, threads: int) -> None:
        self.path, self.wait_s, self.threads = path, wait_s, threads
        self.state, self.error = "loading", ""
        self._session: Any = None
        self._input = ""

    def load(self) -> None:
        try:
            deadline = time.monotonic() + self.wait_s
            while not self.path.is_file() and time.monotonic() < deadline:
                time.sleep(0.1)
            if not self.path.is_file():
                raise FileNotFoundError(
                    f"no model at {self.path}: set $MODEL, or export one with "
                    f"`python examples/train/train_digits.py --onnx {self.path}`"
                )
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            session = ort.InferenceSession(
                str(self.path), options, providers=["CPUExecutionProvider"]
            )
            self._input = session.get_inputs()[0].name
            self._session = session
            self.state = "ready"
        except Exception as exc:
            self.state, self.error = "failed", f"{type(exc).__name__}: {exc}"

    def predict(self, batch: np.ndarray) -> tuple[list[int], list[list[float]]]:
        (logits,) = self._session.run(None, {self._input: batch})
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        return logits.argmax(axis=1).tolist(), probabilities.round(6).tolist()


def parse_inputs(body: bytes) -> np.ndarray:
    """``{"inputs": [[64 numbers], ...]}`` → float32 (n, 64); BadRequest naming the field."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    rows = data.get("inputs") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise BadRequest('inputs: expected {"inputs": [[64 numbers], ...]} with at least one row')
    if len(rows) > MAX_BATCH:
        raise BadRequest(f"inputs: {len(rows)} rows, at most {MAX_BATCH} per request")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != FEATURES:
            size = f"{len(row)} values" if isinstance(row, list) else type(row).__name__
            raise BadRequest(f"inputs[{i}]: {size}, expected a list of {FEATURES} numbers")
        for j, value in enumerate(row):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadRequest(f"inputs[{i}][{j}]: {value!r} is not a number")
    batch = np.asarray(rows, dtype=np.float32)
    if not np.isfinite(batch).all():
        raise BadRequest("inputs: NaN or infinite values")
    return batch


class DigitsServer(ThreadingHTTPServer):
    """The HTTP server and what its handlers share: the model, POSTs in flight, draining."""

    daemon_threads = True  # idle keep-alive connections do not hold the exit; drain() waits
    block_on_close = False

    def __init__(self, address: tuple[str, int], model: Model, delay_s: float) -> None:
        super().__init__(address, Handler)
        self.model, self.delay_s = model, delay_s
        self.access_log = os.environ.get("ACCESS_LOG", "") == "1"
        self.draining = False
        self._lock = threading.Condition()
        self._in_flight = 0

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1
            self._lock.notify_all()

    @property
    def in_flight(self) -> int:
        """POST requests being answered now."""
        return self._in_flight

    def drain(self, timeout_s: float) -> bool:
        """Wait for the POSTs in flight; False if some were still running at the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._in_flight and time.monotonic() < deadline:
                self._lock.wait(0.05)
            return self._in_flight == 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "serve-digits/1"
    timeout = 120  # an idle keep-alive connection is closed after that
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    server: DigitsServer

    def do_GET(self) -> None:
        self._serve(self._get)

    def do_HEAD(self) -> None:
        self._serve(self._get, head=True)

    def do_POST(self) -> None:
        self.server.begin()  # from before the body is read until the answer is written
        try:
            self._serve(self._predict)
        finally:
            self.server.end()

    def _get(self) -> tuple[HTTPStatus, dict[str, Any]]:
        model, path = self.server.model, self.path.split("?", 1)[0]
        if path == "/health":
            if self.server.draining:
                return HTTPStatus.SERVICE_UNAVAILABLE, {"status": "draining"}
            ok = model.state == "ready"
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            body = {
                "status": model.state,
                "model": str(model.path),
                "in_flight": self.server.in_flight,
            }
            return status, body
        if path == "/":
            return HTTPStatus.OK, {"service": "serve-digits", "predict": "POST /predict"}
        if path == "/predict":
            raise BadRequest("/predict takes POST", HTTPStatus.METHOD_NOT_ALLOWED)
        raise BadRequest(f"no route {path}", HTTPStatus.NOT_FOUND)

    def _predict(self) -> tuple[HTTPStatus, dict[str, Any]]:
        path = self.path.split("?", 1)[0]
        body = self._body()  # read first, so the connection stays usable after an error
        if path != "/predict":
            raise BadRequest(f"no route POST {path}", HTTPStatus.NOT_FOUND)
        model = self.server.model
        if model.state != "ready":
            raise BadRequest(f"model {model.state}", HTTPStatus.SERVICE_UNAVAILABLE)
        batch = parse_inputs(body)
        if self.server.delay_s:
            time.sleep(self.server.delay_s)
        predictions, probabilities = model.predict(batch)
        return HTTPStatus.OK, {"predictions": predictions, "probabilities": probabilities}

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise BadRequest("a body needs Content-Length or chunked encoding", 411)
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise BadRequest(f"Content-Length {length}: at most {MAX_BODY_BYTES} bytes", 413)
        return self.rfile.read(int(length))

    def _chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                size = int(line, 16) if line.isalnum() else -1
            except ValueError:
                size = -1
            if size < 0:
                self.close_connection = True
                raise BadRequest(f"bad chunk size {line!r}")
            total += size
            if total > MAX_BODY_BYTES:
                self.close_connection = True
                raise BadRequest(f"body over {MAX_BODY_BYTES} bytes", 413)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline(3)

    def _serve(self, route: Any, head: bool = False) -> None:
        try:
            try:
                status, payload = route()
            except BadRequest as exc:
                status, payload = HTTPStatus(exc.status), {"error": str(exc)}
            except Exception as exc:  # a bug or a runtime failure: answer, log, keep serving
                print(f"error: {self.command} {self.path}: {exc!r}", file=sys.stderr, flush=True)
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": repr(exc)}
            data = json.dumps(payload, separators=(",", ":")).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.server.draining or self.close_connection:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if not head:
                self.wfile.write(data)
        except ConnectionError:  # the client went away mid-answer
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.access_log:
            super().log_message(format, *args)


def serve(server: DigitsServer, drain_timeout_s: float) -> int:
    """Load the model beside the accept loop, run it until a signal or a failed load; drain."""
    model = server.model
    stopping = threading.Event()

    def stop(reason: str) -> None:
        if not stopping.is_set():
            stopping.set()
            print(reason, flush=True)
            threading.Thread(target=server.shutdown, daemon=True).start()

    def load() -> None:
        model.load()
        if model.state == "ready":
            print(f"model loaded from {model.path}; ready", flush=True)
        else:
            print(f"error: {model.error}", file=sys.stderr, flush=True)
            stop("model failed to load; stopping")

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        server.draining = True
        stop(f"{signal.Signals(signum).name}: draining")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    threading.Thread(target=load, name="load-model", daemon=True).start()
    server.serve_forever(poll_interval=0.1)
    server.draining = True
    drained = server.drain(drain_timeout_s)
    server.server_close()
    if model.state == "failed":
        return 2
    print("drained; bye" if drained else "drain timed out; exiting", flush=True)
    return 0


def main() -> int:
    raw_port = os.environ.get("PORT", "8080")
    if not raw_port.isdigit() or not 0 <= int(raw_port) <= 65535:
        fail(f"$PORT={raw_port!r}: expected a port number 0..65535")
    here = Path(__file__).resolve().parent
    model = Model(
        Path(os.environ.get("MODEL") or here / "model.onnx"),
        wait_s=env_float("MODEL_WAIT_S", 0.0),
        threads=max(1, int(env_float("ORT_THREADS", 1))),
    )
    host = os.environ.get("BIND_HOST", "127.0.0.1")
    try:
        server = DigitsServer((host, int(raw_port)), model, env_float("PREDICT_DELAY_S", 0.0))
    except OSError as exc:
        fail(f"cannot listen on {host}:{raw_port} ($BIND_HOST, $PORT): {exc.strerror}")
    print(f"serve-digits on http://{host}:{server.server_address[1]}", flush=True)
    return serve(server, env_float("DRAIN_TIMEOUT_S", 30.0))


if __name__ == "__main__":
    sys.exit(main())
