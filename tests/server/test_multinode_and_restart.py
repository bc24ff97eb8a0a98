"""Two-node DDP through the real server (torchrun on each node, gloo over loopback), and a server
killed mid-run that a new server process resumes from the DB without duplicating a node."""

from __future__ import annotations

import pytest

from gpulease.providers.base import TAG_CLUSTER, TAG_OWNER
from tests.server.conftest import ROOT, ServerProcess, task_body, wait_until

pytestmark = pytest.mark.slow


@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_ddp_on_two_nodes_reaches_world_size_2(server: ServerProcess) -> None:
    from gpulease.spec import load_task

    task = load_task(ROOT / "examples" / "ddp-2node.yaml")
    api = server.start().api
    api.launch(task.model_dump(mode="json", by_alias=True, exclude_defaults=True),
               workdir=str(ROOT / "examples" / "train"))  # fmt: skip
    done = server.wait_status("ddp-2node", {"succeeded", "failed"}, timeout=120)
    logs = server.all_logs("ddp-2node")
    assert done["status"] == "succeeded", (done["reason"], logs, server.all_logs("ddp-2node", 1))
    assert "world size 2" in logs
    assert sorted(n["rank"] for n in done["nodes"]) == [0, 1]
    assert len(server.instances("ddp-2node")) == 2


def test_a_restarted_server_resumes_a_run_without_duplicate_nodes(server: ServerProcess) -> None:
    api = server.start().api
    owner = api.health()["owner"]
    api.launch(task_body("echo started; sleep 3; echo finished", name="resume", nodes=2))
    wait_until(lambda: "started" in server.all_logs("resume"), 30, "the task to start")
    server.kill()  # hard: no shutdown, claims held

    api = server.start().api
    assert api.health()["owner"] == owner
    done = server.wait_status("resume", {"succeeded", "failed"}, timeout=60)
    assert done["status"] == "succeeded", done["reason"]
    assert "finished" in server.all_logs("resume")
    listed = server.provider().list_instances({TAG_CLUSTER: "resume", TAG_OWNER: owner})
    assert len(listed) == 2 and len(done["nodes"]) == 2
