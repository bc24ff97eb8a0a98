"""The server on a team database: a real server process whose state DB is a real PostgreSQL
server (``GPULEASE_DB_URL``) launches, runs and tears down a task, and a restarted server resumes
from that database."""

from __future__ import annotations

import pytest

from tests.dbfixtures import fresh_postgres_url, postgres_server  # noqa: F401 - fixtures
from tests.server.conftest import ServerProcess, task_body

pytestmark = pytest.mark.slow


def test_launch_run_restart_and_down_on_postgresql(
    server: ServerProcess,
    fresh_postgres_url: str,  # noqa: F811 - the fixture, by name
) -> None:
    api = server.start(GPULEASE_DB_URL=fresh_postgres_url).api
    api.launch(task_body("echo on-postgres; sleep 2; echo done", name="pg"))
    server.wait_status("pg", {"running", "succeeded"})
    server.kill()  # the next server finds the cluster in PostgreSQL and finishes the work
    api = server.start(GPULEASE_DB_URL=fresh_postgres_url).api
    done = server.wait_status("pg", {"succeeded", "failed"})
    assert done["status"] == "succeeded", done
    assert "on-postgres" in server.all_logs("pg") and len(server.instances("pg")) == 1
    api.down("pg")
    server.wait_status("pg", {"terminated"})
    assert server.node_processes() == []
