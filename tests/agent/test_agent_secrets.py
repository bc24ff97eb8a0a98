"""A task's secrets on a REAL agent process (issue 20), each test with a random canary: the value
reaches the job's environment (the job writes its sha256, never the value) and ``exec``'s, and
is nowhere else — not in ``task.json`` while the task runs, not in any file under the agent's
root once it ended (every file read as bytes: ``secrets.env`` is gone), not in an answer, not in
the agent's own log at DEBUG; a restarted agent resumes the task with it; a bad body is a 422
naming the variable, never the value. (The container path: test_agent_containers.py.)"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from tests.agent.conftest import AgentProcess, task
from tests.waiting import wait_until

SHA = 'printf %s "$HF_TOKEN" | sha256sum | cut -d" " -f1'  # the job shows a hash, not the value
ODD = "  a=b 'q' \"d\" $HOME \\n `x` \f\x85 "  # kept as it is: no quoting, expansion or splitting
ODD_SHA = 'printf %s "$ODD" | sha256sum | cut -d" " -f1'
WAIT_GO = "touch ready; while [ ! -e go ]; do sleep 0.05; done"  # in the work dir


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def files_holding(root: Path, canary: str) -> list[Path]:
    """Every regular file under ``root`` whose bytes hold ``canary``."""
    found = []
    for top, _dirs, names in os.walk(root):
        for name in names:
            path = Path(top, name)
            if path.is_file() and not path.is_symlink() and canary.encode() in path.read_bytes():
                found.append(path)
    return found


def _debug_agent(agent_factory: Callable[..., AgentProcess]) -> AgentProcess:
    return agent_factory(args=("--log-level", "DEBUG"))


def _answers(node: AgentProcess, task_id: str) -> str:
    """Everything the agent answers about the task and the node."""
    api = node.api
    parts: list[Any] = [api.status(task_id), api.tasks(), api.health(), api.metrics()]
    return json.dumps(parts) + api.logs(task_id).data.decode()


def test_a_secret_reaches_the_job_and_exec_and_leaves_no_trace(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    canary = secrets.token_hex(16)
    node = _debug_agent(agent_factory)
    work, task_dir = node.node_dir / "work", node.node_dir / "tasks" / "s-env"
    run = f"{SHA} > seen; {WAIT_GO}; echo done"
    # the task's own HF_TOKEN is overridden by the secret of that name
    sub = task("s-env", run=run, envs={"HF_TOKEN": "from-envs"}, secret_set="ss-env")
    values = {"HF_TOKEN": SecretStr(canary)}
    node.api.submit(sub, values)
    wait_until((work / "ready").exists, 10, "the job to start")

    assert canary.encode() not in (task_dir / "task.json").read_bytes()
    held = task_dir / "secrets.env"
    assert stat.S_IMODE(held.stat().st_mode) == 0o600
    assert held.read_text() == f"HF_TOKEN={canary}\n"
    assert node.api.exec("s-env", SHA).output.strip() == sha(canary)
    assert node.api.submit(sub, values)["attempt"] == 0  # a repeat: the same task, no conflict

    (work / "go").touch()
    assert node.wait_state("s-env")["state"] == "SUCCEEDED", node.all_logs("s-env")
    assert (work / "seen").read_text().strip() == sha(canary)
    assert not held.exists()
    after = node.api.exec("s-env", 'echo "[$HF_TOKEN]"')  # gone from the agent's memory too
    assert after.output == "[from-envs]\n"
    assert canary not in _answers(node, "s-env")
    node.kill()
    assert "POST /v1/tasks 201" in node.log_path.read_text()
    assert files_holding(node.root, canary) == []  # the node dir, the agent's log, all


def test_a_restarted_agent_resumes_the_task_with_its_secret(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    canary = secrets.token_hex(16)
    node = _debug_agent(agent_factory)
    work = node.node_dir / "work"
    run = f"{SHA} > seen; {ODD_SHA} > odd"
    sub = task("s-resume", setup=WAIT_GO, run=run, secret_set="ss-resume")
    node.api.submit(sub, {"HF_TOKEN": SecretStr(canary), "ODD": SecretStr(ODD)})
    wait_until((work / "ready").exists, 10, "setup to start")
    node.kill()  # the agent only: setup lives on
    node.start()  # a new agent: it adopts setup, then starts run with the secret it kept
    (work / "go").touch()
    assert node.wait_state("s-resume")["state"] == "SUCCEEDED", node.all_logs("s-resume")
    assert (work / "seen").read_text().strip() == sha(canary)
    assert (work / "odd").read_text().strip() == sha(ODD)
    assert canary not in _answers(node, "s-resume")
    node.kill()
    # what an agent killed between the task's end and the file's removal would leave
    task_dir = node.node_dir / "tasks" / "s-resume"
    for left in ("secrets.env", ".secrets.env.tmp-1-0123abcd"):
        (task_dir / left).write_text(f"HF_TOKEN={canary}\n")
    node.start()  # it finds the task ended: the files go
    assert node.api.status("s-resume")["state"] == "SUCCEEDED"
    node.kill()
    assert files_holding(node.root, canary) == []


def test_bad_secrets_are_refused_naming_the_variable_never_the_value(
    agent_factory: Callable[..., AgentProcess],
) -> None:
    canary = secrets.token_hex(16)
    node = _debug_agent(agent_factory)
    base: dict[str, Any] = {"task_id": "s-bad", "run": "true", "secret_set": "ss-bad"}
    cut_short = json.dumps({**base, "secrets": {"HF_TOKEN": canary}}).encode()[:-3]
    bodies: list[tuple[dict[str, Any] | bytes, str]] = [
        ({**base, "secret_set": None, "secrets": {"HF_TOKEN": canary}},
         "secrets: given for a task without secret_set"),
        (base, "secrets: required for a task with secret_set"),
        ({**base, "secrets": {"BAD-NAME": canary}}, "'BAD-NAME' is not a valid environment"),
        ({**base, "secrets": {"GPULEASE_TASK_ID": canary}}, "GPULEASE_TASK_ID is set by the agent"),
        ({**base, "secrets": {"HF_TOKEN": f"{canary}\nX=1"}}, "secrets.HF_TOKEN: a secret's value"),
        ({**base, "secrets": {"HF_TOKEN": [canary]}}, "secrets.HF_TOKEN: Input should be a valid"),
        ({**base, "secrets": canary}, "secrets: Input should be a valid dictionary"),
        ({**base, "task_id": "../x", "secrets": {"HF_TOKEN": canary}}, "task_id: String should"),
        (cut_short, "body: not valid JSON"),
        (json.dumps([canary]).encode(), "body: expected a JSON object"),
    ]  # fmt: skip
    headers = {"Authorization": f"Bearer {node.token}"}
    for body, expected in bodies:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        answer = httpx.post(f"{node.url}/v1/tasks", content=content, headers=headers)
        assert answer.status_code == 422, (expected, answer.text)
        assert expected in answer.json()["error"]["message"], answer.text
        assert canary not in answer.text
    assert node.api.tasks() == []
    node.kill()
    assert "POST /v1/tasks 422" in node.log_path.read_text()
    assert files_holding(node.root, canary) == []
