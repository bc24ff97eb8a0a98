"""A user's main job, end to end through the real server process: launch the quickstart task on
the local provider, watch it succeed, read its logs, exec on its node, take it down — and find no
process of it left in the process table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import ROOT, ServerProcess, task_body

pytestmark = pytest.mark.slow


def test_quickstart_trains_to_an_accuracy_and_down_leaves_no_process(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the README's SDK example: the Task itself, its relative workdir taken from the
    caller's directory."""
    import gpulease

    monkeypatch.chdir(ROOT)
    api = server.start().api
    view = api.launch(gpulease.load_task("examples/quickstart.yaml"))
    assert view["status"] == "pending" and view["provider"] == "local"
    assert view["warnings"] == []
    done = server.wait_status("quickstart", {"succeeded", "failed"})
    logs = server.all_logs("quickstart")
    assert done["status"] == "succeeded", (done["reason"], logs)
    assert "test accuracy" in logs and "world size 1" in logs
    assert done["exit_code"] == 0 and [n["state"] for n in done["nodes"]] == ["ready"]

    listed = api.clusters()
    assert [c["name"] for c in listed] == ["quickstart"]
    assert "token" not in str(listed).lower()

    result = api.exec("quickstart", "echo rank=$GPULEASE_NODE_RANK; ls")
    assert result["exit_code"] == 0
    assert "rank=0" in result["output"] and "train_digits.py" in result["output"]

    secrets = [(server.home / "server.token").read_text().strip()]
    secrets += [p.read_text().strip() for p in (server.home / "local").glob("nodes/*/token")]
    assert len(secrets) == 2
    log = (server.home / "server.log").read_text()
    assert not [s for s in secrets if s in log or s in str(listed)]  # no token is ever logged

    assert server.node_processes()
    assert api.down("quickstart")["status"] == "terminating"
    gone = server.wait_status("quickstart", {"terminated"}, timeout=30)
    assert [n["state"] for n in gone["nodes"]] == ["terminated"]
    assert server.node_processes() == []
    assert server.instances("quickstart") == []


def test_a_failing_task_fails_the_cluster_with_its_exit_code(server: ServerProcess) -> None:
    api = server.start().api
    api.launch(task_body("echo about to fail; exit 7", name="bad"))
    done = server.wait_status("bad", {"succeeded", "failed"}, timeout=30)
    assert done["status"] == "failed" and done["exit_code"] == 7
    assert "exit code 7" in done["reason"]
    assert "about to fail" in server.all_logs("bad")


def test_stop_and_start_keep_the_node(server: ServerProcess, tmp_path: Path) -> None:
    api = server.start().api
    api.launch(task_body("echo hello > out.txt", name="st"))
    server.wait_status("st", {"succeeded"}, timeout=30)
    (instance,) = server.instances("st")
    api.stop("st")
    server.wait_status("st", {"stopped"}, timeout=30)
    assert server.node_processes() == []
    api.start("st")
    back = server.wait_status("st", {"succeeded"}, timeout=30)
    assert [n["instance_id"] for n in back["nodes"]] == [instance.id]
    assert api.exec("st", "cat out.txt")["output"] == "hello\n"  # the disk was kept
