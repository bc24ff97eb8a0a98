"""A random canary as a task's secret, on every surface: a real server process on SQLite and on
a real PostgreSQL, real agents, real jobs. The tasks see the value (they print its sha256, never
the value); then nothing holds it: no API answer (cluster, job and service views, logs, the
dashboard's pages and its data routes, ``/metrics``), no file under the home (the state DB and
its WAL, the server's log, every node's files and logs after the task ended), no ``pg_dump`` of
the PostgreSQL database.

Three ways a secret travels: a plain launch; a managed job through a recovery (its first attempt
fails, the next one on a new node gets the same secret from the vault); a service's replica.
(The aws path, through the SSH tunnel to a network-namespace VM: tests/cli/test_aws_vm_cli.py.)
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.dbfixtures import fresh_postgres_url, postgres_server  # noqa: F401 - fixtures
from tests.server.conftest import ServerProcess, task_body
from tests.state.postgres import PostgresServer
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
SECRET = "CANARY_TOKEN"
PRINT_DIGEST = f'printf %s "${SECRET}" | sha256sum'
SIM = "providers:\n  sim:\n    time_scale: 60\n    provision_seconds: [30, 60]\n"
REPLICA = f"""\
import hashlib, http.server, os
digest = hashlib.sha256(os.environ["{SECRET}"].encode()).hexdigest().encode()
class Replica(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(digest)))
        self.end_headers(); self.wfile.write(digest)
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Replica).serve_forever()
"""


def _sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def files_holding(root: Path, needle: str) -> list[Path]:
    """Every file under ``root`` whose bytes hold ``needle`` (as text or as hex)."""
    wanted = (needle.encode(), needle.encode().hex().encode())
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(w in data for w in wanted):
                found.append(path)
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
def db_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    yield {"GPULEASE_DB_URL": request.getfixturevalue("fresh_postgres_url")}


def _dashboard_pages(server: ServerProcess, names: dict[str, str]) -> list[str]:
    """The dashboard's pages and the data routes they read, as a logged-in browser gets them."""
    link = server.api.dashboard_login()["url"]
    with httpx.Client(follow_redirects=True, timeout=30) as browser:
        pages = [browser.get(link).text]  # the overview
        base = str(link).split("/ui/")[0]
        for path in ("/ui/cluster?name=" + names["cluster"], "/ui/service?name=" + names["service"],
                     "/v1/clusters", "/v1/jobs", "/v1/services", f"/v1/services/{names['service']}",
                     f"/v1/services/{names['service']}/load"):  # fmt: skip
            pages.append(browser.get(base + path).text)
    return pages


def _responses(server: ServerProcess, job_id: int) -> list[str]:
    api = server.api
    views: list[Any] = [api.clusters(), api.cluster("can", history=True), api.jobs(),
                        api.job(job_id, history=True), api.serve_status("svc")]  # fmt: skip
    token = (server.home / "server.token").read_text().strip()
    metrics = httpx.get(f"{api.url}/metrics", timeout=30,
                        headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert metrics.status_code == 200 and "gpulease_" in metrics.text
    return [repr(v) for v in views] + [metrics.text]


def _pg_dump(server: PostgresServer, url: str) -> str:
    database = url.rsplit("/", 1)[-1].split("?", maxsplit=1)[0]
    done = server._run("pg_dump", "-h", "127.0.0.1", "-p", str(server.port), "-U",
                       "gpulease", database)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_canary_secret_reaches_each_task_and_no_surface(
    server: ServerProcess, db_env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    canary = secrets.token_hex(16)
    given = {SECRET: canary}
    (server.home / "config.yaml").write_text(SIM)
    api = server.start(**db_env).api

    # a plain launch
    api.launch(task_body(PRINT_DIGEST, name="can", secrets={SECRET: None}), secrets=given)
    assert server.wait_status("can", {"succeeded", "failed"})["status"] == "succeeded"
    assert _sha(canary) in server.all_logs("can")

    # a managed job through a recovery: the first attempt fails, the second sees the secret
    marker = tmp_path / "failed-once"
    check = f'[ "$({PRINT_DIGEST} | cut -c1-64)" = {_sha(canary)} ] || exit 3'  # else: FAILED
    run = f"{check}; if [ ! -e {marker} ]; then touch {marker}; exit 1; fi"
    job_task = {**task_body(run, name="job"), "resources": {"providers": ["sim"]},
                "job_recovery": {"max_restarts_on_errors": 1}}  # fmt: skip
    job = api.job_launch(job_task, secrets=given)
    job_id = int(job["id"])
    done = wait_until(lambda: (v := api.job(job_id))["status"] in {"succeeded", "failed"} and v,
                      120, "the job to end")  # fmt: skip
    assert done["status"] == "succeeded" and done["attempt"] >= 2, done
    assert server.instances("can")  # its node is still up, its task ended: no file holds it
    assert files_holding(server.home, canary) == []

    # a service's replica
    app = tmp_path / "app" / "replica.py"
    app.parent.mkdir()
    app.write_text(REPLICA)
    service = {**task_body(f"exec python {app.name}", name="svc"), "workdir": str(app.parent),
               "service": {"port": 8080, "replicas": {"min": 1, "max": 1},
                           "readiness_probe": {"path": "/", "initial_delay": "60s"}}}  # fmt: skip
    api.serve_up(service, secrets=given)
    ready = wait_until(lambda: (v := api.serve_status("svc"))["status"] == "ready" and v, 120,
                       "the service to be ready")  # fmt: skip
    assert httpx.get(ready["endpoint"], timeout=30).text == _sha(canary)

    # every surface, while the service runs and after the tasks ended
    seen = _responses(server, job_id) + _dashboard_pages(server, {"cluster": "can",
                                                                  "service": "svc"})  # fmt: skip
    assert [t for t in seen if canary in t] == []
    api.serve_down("svc")
    api.down("can")
    server.wait_status("can", {"terminated"})
    server.stop()  # the SQLite WAL as the server left it, every log flushed
    assert files_holding(server.home, canary) == []
    if db_env:
        dump = _pg_dump(request.getfixturevalue("postgres_server"), db_env["GPULEASE_DB_URL"])
        assert "secret_sets" in dump and canary not in dump and canary.encode().hex() not in dump
