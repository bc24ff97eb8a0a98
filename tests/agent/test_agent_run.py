"""A real agent runs setup then run with the node environment, streams output by byte offset,
maps exit codes to states and reports health and a heartbeat."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpulease.agent.client import AgentRequestError
from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until


def test_the_job_sees_the_node_environment(agent_factory) -> None:  # type: ignore[no-untyped-def]
    agent: AgentProcess = agent_factory(env={"CUDA_VISIBLE_DEVICES": "2,3"}, rank=1)
    sub = task(
        "train-7",
        run="python3 -c 'import json, os; print(json.dumps(dict(os.environ)))'",
        envs={"MY_SETTING": "x", "GPULEASE_NODE_RANK": "99"},  # node variables win
        node_rank=1,
        num_nodes=2,
        node_ips=["10.0.0.1", "10.0.0.2"],
        gpus_per_node=2,
        master_port=29555,
    )
    agent.api.submit(sub)
    assert agent.wait_state("train-7")["state"] == "SUCCEEDED"
    env = json.loads(agent.all_logs("train-7"))
    assert env["GPULEASE_NODE_RANK"] == "1" and env["NODE_RANK"] == "1"
    assert env["GPULEASE_NUM_NODES"] == "2" and env["NNODES"] == "2"
    assert env["GPULEASE_NODE_IPS"] == "10.0.0.1\n10.0.0.2"
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29555"
    assert env["GPULEASE_GPUS_PER_NODE"] == "2"
    assert env["GPULEASE_TASK_ID"] == "train-7"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # from the agent's environment
    assert env["MY_SETTING"] == "x"
    assert env["PYTHONUNBUFFERED"] == "1"
    assert Path(env["GPULEASE_CHECKPOINT_DIR"]) == agent.node_dir / "work" / "checkpoints"
    assert Path(env["GPULEASE_CHECKPOINT_DIR"]).is_dir()
    assert env["GPULEASE_PREEMPTION_FILE"].startswith(str(agent.node_dir))
    assert not Path(env["GPULEASE_PREEMPTION_FILE"]).exists()
    assert Path(env["GPULEASE_WORK_DIR"]) == Path(env["PWD"]) == agent.node_dir / "work"


def test_logs_stream_by_offset_while_the_job_runs(agent: AgentProcess, tmp_path: Path) -> None:
    go = tmp_path / "go"
    run = f"echo first; while [ ! -e {go} ]; do sleep 0.02; done; echo second >&2"
    agent.api.submit(task(run=run))
    first = wait_until(lambda: (c := agent.api.logs("t1", 0)).data and c, what="first line")
    assert first.data == b"first\n" and first.next_offset == 6 and not first.complete
    assert agent.api.status("t1")["state"] == "RUNNING"
    assert agent.api.logs("t1", first.next_offset).data == b""  # nothing new yet
    go.touch()
    agent.wait_state("t1")
    rest = agent.api.logs("t1", first.next_offset)
    assert rest.data == b"second\n" and rest.complete and rest.state == "SUCCEEDED"
    assert agent.api.logs("t1", 0, limit=3).data == b"fir"


def test_setup_runs_before_run_and_both_are_logged(agent: AgentProcess) -> None:
    agent.api.submit(task(setup="echo setting up; touch ready", run="test -e ready && echo ran"))
    status = agent.wait_state("t1")
    assert status["state"] == "SUCCEEDED" and status["exit_code"] == 0
    assert agent.all_logs("t1") == "setting up\nran\n"
    states = [h["state"] for h in status["history"]]
    assert states == ["PENDING", "SETTING_UP", "RUNNING", "SUCCEEDED"]


@pytest.mark.parametrize(
    ("setup", "run", "state", "code", "phase"),
    [
        (None, "exit 3", "FAILED", 3, "run"),
        ("exit 2", "echo never", "FAILED", 2, "setup"),
        (None, "echo saved; exit 75", "PREEMPTED", 75, "run"),
        (None, "true", "SUCCEEDED", 0, "run"),
    ],
)
def test_exit_codes_map_to_states(  # noqa: PLR0917 - the parametrised columns
    shared_agent: AgentProcess, setup: str | None, run: str, state: str, code: int, phase: str
) -> None:
    task_id = f"exit-{state}-{code}"
    shared_agent.api.submit(task(task_id, setup=setup, run=run))
    status = shared_agent.wait_state(task_id)
    assert (status["state"], status["exit_code"], status["phase"]) == (state, code, phase)
    assert "never" not in shared_agent.all_logs(task_id)
    assert status["finished_at"] >= status["started_at"] >= status["submitted_at"]


def test_health_reports_version_rank_uptime_and_task(agent: AgentProcess) -> None:
    health = agent.api.health()
    assert health["api_version"] == 1 and health["agent_version"]
    assert health["node_rank"] == 0 and health["uptime_s"] >= 0 and health["task"] is None
    agent.api.submit(task(run="true"))
    agent.wait_state("t1")
    assert agent.api.health()["task"] == {"task_id": "t1", "attempt": 0, "state": "SUCCEEDED"}
    beat = agent.node_dir / "heartbeat"
    first = float(beat.read_text())
    wait_until(lambda: float(beat.read_text()) > first, 3.0, "a newer heartbeat")
    assert abs(float(beat.read_text()) - time.time()) < 5


def test_the_agent_answers_soon_after_it_starts(agent: AgentProcess) -> None:
    assert agent.started_in < 1.5  # typically ~0.2 s; generous for loaded CI machines


def test_one_task_at_a_time_and_unknown_tasks_are_404(agent: AgentProcess) -> None:
    agent.api.submit(task("long", run="sleep 30"))
    with pytest.raises(AgentRequestError) as busy:
        agent.api.submit(task("other", run="true"))
    assert (busy.value.status, busy.value.code) == (409, "node_busy")
    with pytest.raises(AgentRequestError) as missing:
        agent.api.status("nope")
    assert missing.value.status == 404
    agent.api.cancel("long", grace_s=0.1)
    assert agent.wait_state("long")["state"] == "CANCELLED"


def test_invalid_submissions_are_422(shared_agent: AgentProcess) -> None:
    http = shared_agent.api._http.http  # the raw httpx client: no error mapping
    bad = http.post("/v1/tasks", json={"task_id": "../x", "run": "true"})
    assert bad.status_code == 422 and "task_id" in bad.json()["error"]["message"]
    missing = http.post("/v1/tasks", json={"task_id": "t", "run": "true", "workdir": "/no/such"})
    assert missing.status_code == 422 and missing.json()["error"]["code"] == "missing_source"


def test_shutdown_stops_the_agent(agent: AgentProcess) -> None:
    agent.api.shutdown()
    assert agent.proc is not None
    assert agent.proc.wait(5) == 0
