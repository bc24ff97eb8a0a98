"""Submitting is idempotent by (task id, attempt); a restarted agent reports the task it ran and
resumes one it left running."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.agent.client import AgentRequestError
from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until


def test_submitting_the_same_task_twice_runs_it_once(agent: AgentProcess, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sub = task(run=f"echo run >> {runs}")
    first = agent.api.submit(sub)
    again = agent.api.submit(sub)
    assert first["task_id"] == again["task_id"] == "t1"
    agent.wait_state("t1")
    assert agent.api.submit(sub)["state"] == "SUCCEEDED"
    assert runs.read_text() == "run\n"
    response = agent.api._http.http.post("/v1/tasks", json=sub.model_dump())
    assert response.status_code == 200  # a repeat is 200, the first submit was 201


def test_the_same_attempt_with_another_body_is_a_conflict(agent: AgentProcess) -> None:
    agent.api.submit(task(run="true"))
    with pytest.raises(AgentRequestError) as err:
        agent.api.submit(task(run="false"))
    assert (err.value.status, err.value.code) == (409, "conflict")


def test_a_new_attempt_reruns_with_the_same_task_id_and_appends_to_the_log(
    agent: AgentProcess,
) -> None:
    agent.api.submit(task(run='echo "attempt of $GPULEASE_TASK_ID"; exit 75'))
    assert agent.wait_state("t1")["state"] == "PREEMPTED"
    agent.api.submit(task(attempt=1, run='echo "attempt of $GPULEASE_TASK_ID"'))
    status = agent.wait_state("t1")
    assert (status["state"], status["attempt"]) == ("SUCCEEDED", 1)
    assert agent.all_logs("t1") == "attempt of t1\nattempt of t1\n"
    with pytest.raises(AgentRequestError) as err:
        agent.api.submit(task(attempt=0, run="true"))
    assert err.value.code == "stale_attempt"


def test_a_restarted_agent_still_reports_the_finished_task(agent: AgentProcess) -> None:
    agent.api.submit(task(run="echo done; exit 3"))
    before = agent.wait_state("t1")
    agent.kill()
    agent.start()
    after = agent.api.status("t1")
    assert after == before
    assert agent.all_logs("t1") == "done\n"
    assert agent.api.health()["task"]["state"] == "FAILED"


def test_a_restarted_agent_adopts_the_job_it_left_running(
    agent: AgentProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    run = f"echo started; while [ ! -e {go} ]; do sleep 0.02; done; echo finished; exit 75"
    agent.api.submit(task(run=run))
    wait_until(lambda: agent.api.logs("t1").data, what="the job to start")
    agent.kill()  # the agent dies; the job lives on in its own process group
    go.touch()
    agent.start()
    status = agent.wait_state("t1")
    assert (status["state"], status["exit_code"]) == ("PREEMPTED", 75)
    assert agent.all_logs("t1") == "started\nfinished\n"


def test_a_restarted_agent_runs_what_is_left_after_setup(
    agent: AgentProcess, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    setup = f"echo setup; while [ ! -e {go} ]; do sleep 0.02; done"
    agent.api.submit(task(setup=setup, run="echo run"))
    wait_until(lambda: agent.api.logs("t1").data, what="setup to start")
    agent.kill()
    go.touch()
    agent.start()
    assert agent.wait_state("t1")["state"] == "SUCCEEDED"
    assert agent.all_logs("t1") == "setup\nrun\n"
