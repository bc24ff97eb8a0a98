"""A service end to end on a real server process and the real local provider: ``serve up`` of a
tiny stdlib HTTP replica (it reads ``$PORT``, answers ``/health``), requests through the endpoint
on the server's host, the status view (replicas, decisions, load) and ``/metrics``, a replica's
logs, a server killed and restarted (the endpoint back on its port, the same replica), a rolling
``serve update`` under steady requests that drops none, a scale-up under slow concurrent
requests and the scale-down after them (both in the decisions), and ``serve down`` leaving no
cluster and no node process."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from gpulease.cli.serve_cmd import report
from tests.server.conftest import ServerProcess
from tests.waiting import wait_until

REPLICA = """\
import http.server, json, os, sys, time

class Replica(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/slow":
            time.sleep(2.0)
        body = json.dumps({"version": os.environ["VERSION"], "path": self.path,
                           "service": os.environ.get("GPULEASE_SERVICE")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

port = int(os.environ["PORT"])
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Replica)
print(f"replica version {os.environ['VERSION']} listening on {port}", flush=True)
server.serve_forever()
"""


def _service(app: Path, version: str, *, autoscale: bool = False) -> dict[str, Any]:
    scaled = {
        "replicas": {"min": 1, "max": 2},
        # sequential requests (1 in flight ÷ 2) stay below 0.9; four slow ones at once do not
        "autoscale": {"metric": "load", "target_per_replica": 2, "cooldown": "0s",
                      "up": {"above": 0.9, "add": 1, "for": "0s"},
                      "down": {"below": 0.3, "remove": 1, "for": "1s"}},
    }  # fmt: skip
    fixed = {"replicas": {"min": 1, "max": 1}}
    return {
        "name": "hello",
        "resources": {"providers": ["local"]},
        "envs": {"VERSION": version},
        "workdir": str(app.parent),  # the app reaches each replica like any task's files
        "run": f"exec python {app.name}",
        "service": {
            "port": 8080,
            "readiness_probe": {"path": "/health", "initial_delay": "60s", "timeout": "2s"},
            **(scaled if autoscale else fixed),
        },
    }


def _ready(server: ServerProcess, version: int) -> dict[str, Any] | None:
    view = server.api.serve_status("hello")
    replicas = view["replicas"]
    settled = all(r["version"] == version and r["state"] == "ready" for r in replicas)
    if view["status"] == "ready" and view["version"] == version and replicas and settled:
        return view
    return None


def _answers(url: str) -> bool | None:
    try:
        return httpx.get(url, timeout=5).status_code == 200 or None
    except httpx.HTTPError:
        return None


class Traffic:
    """Steady GET requests through the endpoint on a thread, counting answers and failures."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ok = 0
        self.failed: list[str] = []
        self.versions: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10.0) as http:
            while not self._stop.is_set():
                try:
                    answer = http.get(f"{self.url}/hello")
                    answer.raise_for_status()
                    self.versions.add(answer.json()["version"])
                    self.ok += 1
                except httpx.HTTPError as exc:
                    self.failed.append(repr(exc))
                self._stop.wait(0.02)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)


def test_serve_up_requests_update_and_down_on_the_local_provider(
    server: ServerProcess, tmp_path: Path
) -> None:
    app = tmp_path / "replica.py"
    app.write_text(REPLICA)
    server.start()
    view = server.api.serve_up(_service(app, "1"))
    assert view["status"] == "pending" and view["endpoint"].startswith("http://127.0.0.1:")
    endpoint = view["endpoint"]
    view = wait_until(lambda: _ready(server, 1), 60, "the first replica to be ready")

    answer = httpx.get(f"{endpoint}/predict", timeout=10)
    assert answer.status_code == 200 and answer.json() == {"version": "1", "path": "/predict",
                                                     "service": "hello"}  # fmt: skip
    (replica,) = view["replicas"]
    assert replica["where"] == "local/local" and replica["spot"] is False
    assert replica["cluster"].startswith("hello-") and replica["index"] == 1
    assert view["decisions"][0]["to"] == 1 and view["desired_replicas"] == 1
    # the balancer counts a request once its answer is written: the client may see it first
    view = wait_until(lambda: ((v := server.api.serve_status("hello"))["load"]["requests"] >= 1
                      and v) or None, 10, "the request counted")  # fmt: skip
    text = report(view)  # what gpulease serve status NAME prints
    assert f"endpoint {endpoint}" in text and "hello-1-1" in text and "req/s" in text
    assert view["cost"]["spent_usd"] >= 0.0
    logs = server.api.serve_logs("hello", replica=1)
    assert b"replica version 1 listening" in logs.data and logs.replica == 1

    server.kill()  # the replica keeps running; a new server opens the endpoint on its port again
    server.start()
    wait_until(lambda: _answers(f"{endpoint}/again"), 30, "the endpoint after a restart")
    assert [r["cluster"] for r in server.api.serve_status("hello")["replicas"]] == ["hello-1-1"]

    with Traffic(endpoint) as traffic:
        updated = server.api.serve_update("hello", _service(app, "2", autoscale=True))
        assert updated["version"] == 2
        wait_until(lambda: _ready(server, 2), 60, "version 2 to replace version 1")
        wait_until(lambda: "2" in traffic.versions or None, 10, "answers of version 2")
    assert traffic.failed == [] and traffic.ok > 0
    assert traffic.versions == {"1", "2"}

    def serving_points() -> list[dict[str, Any]] | None:
        points = server.api.serve_load("hello")["points"]  # the SDK's read of the load history
        return [p for p in points if p["replicas"] >= 1] or None

    last = wait_until(serving_points, 30, "a load point with a replica behind the endpoint")[-1]
    assert last["qps"] >= 0.0 and last["in_flight"] >= 0
    later = server.api.serve_load("hello", since=last["at"])["points"]
    assert later and later[0] == last and all(p["at"] >= last["at"] for p in later)

    _metrics_say_one_ready(server)
    _scale_up_then_down(server, endpoint)

    down = server.api.serve_down("hello")
    assert down["status"] in ("shutting_down", "down")
    wait_until(lambda: server.api.serve_status("hello")["status"] == "down" or None, 60,
               "the service to be down")  # fmt: skip
    assert all(c["status"] == "terminated" for c in server.api.clusters())
    assert server.node_processes() == []
    try:
        httpx.get(f"{endpoint}/hello", timeout=2)
        closed = False
    except httpx.HTTPError:
        closed = True
    assert closed, "the endpoint still answers after serve down"


def _metrics_say_one_ready(server: ServerProcess) -> None:
    token = (server.home / "server.token").read_text().strip()
    url = server.api.url + "/metrics"
    text = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10).text
    assert 'gpulease_service_replicas{service="hello",state="ready"} 1.0' in text
    assert 'gpulease_service_desired_replicas{service="hello"} 1.0' in text
    assert 'gpulease_service_requests_total{service="hello"}' in text
    assert 'gpulease_service_latency_seconds{quantile="0.5",service="hello"}' in text


def _scale_up_then_down(server: ServerProcess, endpoint: str) -> None:
    """Four slow requests at once: load 4 ÷ 2 per replica → 1 → 2; idle after → 2 → 1."""
    with ThreadPoolExecutor(4) as pool:
        answers = [pool.submit(httpx.get, f"{endpoint}/slow", timeout=30) for _ in range(4)]
        wait_until(lambda: server.api.serve_status("hello")["desired_replicas"] == 2 or None, 15,
                   "the scale-up")  # fmt: skip
        assert all(a.result().status_code == 200 for a in answers)
    started = time.monotonic()
    view = wait_until(
        lambda: (
            (v := server.api.serve_status("hello"))["desired_replicas"] == 1
            and len(v["replicas"]) == 1
            and v
        ),
        30,
        "the scale-down to one replica",
    )
    assert time.monotonic() - started >= 0.5  # after the down rule's 1 s, not at once
    moves = [(d["from"], d["to"]) for d in view["decisions"]]
    assert moves[-2:] == [(1, 2), (2, 1)], view["decisions"]
    assert all(d["reason"] and d["at"] > 0 for d in view["decisions"])  # each says why
