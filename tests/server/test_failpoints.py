"""Crash tests: the server dies hard (``os._exit``) at each named step of a launch; a new server
finishes the launch (or FAILS it cleanly), starts no duplicate node, and ``down`` leaves no
process behind."""

from __future__ import annotations

import pytest

from gpulease.controller.failpoints import EXIT_CODE, POINTS
from tests.server.conftest import ServerProcess, task_body

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_at_each_launch_step_is_finished_by_the_next_server(
    server: ServerProcess, point: str
) -> None:
    api = server.start(GPULEASE_FAILPOINT=point).api
    api.launch(task_body("echo ran on $GPULEASE_NODE_RANK", name="crash", nodes=2))
    assert server.wait_exit() == EXIT_CODE

    api = server.start().api
    done = server.wait_status("crash", {"succeeded", "failed"}, timeout=60)
    assert done["status"] == "succeeded", done["reason"]
    assert "ran on 0" in server.all_logs("crash") and "ran on 1" in server.all_logs("crash", 1)
    assert len(server.instances("crash")) == 2  # the same request id never started more
    assert len(done["nodes"]) == 2

    api.down("crash")
    server.wait_status("crash", {"terminated"}, timeout=30)
    assert server.node_processes() == []
