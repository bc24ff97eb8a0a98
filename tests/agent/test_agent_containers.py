"""A task with an image on a REAL agent: its phases run in one container (a real Podman, found on
the agent's ``PATH`` and configured by ``CONTAINERS_CONF`` / ``CONTAINERS_STORAGE_CONF`` in its
environment), a preemption notice reaches the task inside as SIGTERM, ``exec`` enters the
container, an agent restart adopts it; once the task ended nothing of it runs inside, the
container stays for ``exec`` and goes when the node's next task comes. A task's secret reaches
the task inside and ``exec`` there, and neither the container (``inspect``) nor the engine's
storage holds it.

The image is a static busybox imported in the test (no registry is reachable here) into this
session's Podman (``podman_env``, tests/images.py).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from gpulease.agent.containers import ContainerEngine, container_running, run_engine
from tests.agent.conftest import AgentProcess, task
from tests.agent.test_agent_secrets import ODD, files_holding, sha
from tests.images import BUSYBOX_IMAGE
from tests.waiting import wait_until

pytestmark = pytest.mark.xdist_group("podman")
READY = 'touch "$GPULEASE_WORK_DIR/ready"'


@pytest.fixture
def container_agent(
    agent_factory: Callable[..., AgentProcess],
    podman_env: dict[str, str],
    podman_engine: ContainerEngine,
    busybox_image: str,
) -> Iterator[AgentProcess]:
    agent = agent_factory(env=podman_env)
    yield agent
    label = f"label=gpulease.node={agent.node_dir.resolve()}"  # what the node's end would remove
    left = run_engine(podman_engine, podman_engine.argv("ps", "-aq", "--filter", label)).stdout
    if left.split():
        run_engine(podman_engine, podman_engine.argv("rm", "--force", "--time", "0", *left.split()))


def _task_containers(engine: ContainerEngine, task_id: str) -> list[str]:
    argv = engine.argv("ps", "-a", "--quiet", "--filter", f"label=gpulease.task={task_id}")
    done = run_engine(engine, argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_setup_and_run_share_one_container_with_the_task_env_and_it_is_removed_after(
    container_agent: AgentProcess, podman_engine: ContainerEngine
) -> None:
    work = container_agent.node_dir / "work"
    sub = task(
        "c-ok",
        image=BUSYBOX_IMAGE,
        envs={"GREETING": "hello"},
        setup="echo from-setup > /in-the-image",
        run='cat /in-the-image > out.txt; echo "$GREETING $GPULEASE_NODE_RANK $(pwd)" >> out.txt',
    )
    container_agent.api.submit(sub)
    status = container_agent.wait_state("c-ok", timeout=60)
    assert status["state"] == "SUCCEEDED", container_agent.all_logs("c-ok")
    assert (work / "out.txt").read_text() == f"from-setup\nhello 0 {work}\n"
    assert not Path("/in-the-image").exists()  # it was the container's root, not the host's
    assert len(_task_containers(podman_engine, "c-ok")) == 1  # kept for exec
    after = container_agent.api.exec("c-ok", "cat /in-the-image")
    assert (after.exit_code, after.output) == (0, "from-setup\n")
    container_agent.api.submit(task("next", run="true"))  # the node's next task
    assert container_agent.wait_state("next")["state"] == "SUCCEEDED"
    assert _task_containers(podman_engine, "c-ok") == []


def test_a_preemption_notice_reaches_the_task_inside_and_exit_75_is_preempted(
    container_agent: AgentProcess, podman_engine: ContainerEngine
) -> None:
    run = (
        'on_term() { test -e "$GPULEASE_PREEMPTION_FILE" && echo notice-seen; '
        'touch "$GPULEASE_CHECKPOINT_DIR/saved"; exit 75; }; trap on_term TERM; '
        + READY
        + "; while :; do sleep 0.1; done"
    )
    container_agent.api.submit(task("c-pre", image=BUSYBOX_IMAGE, run=run))
    work = container_agent.node_dir / "work"
    wait_until((work / "ready").exists, 60, "the task to start in its container")
    joined = container_agent.api.exec("c-pre", "test -d /proc/1 && cat /proc/1/comm")
    assert joined.exit_code == 0 and joined.output.strip() != "", joined.output
    container_agent.api.preempt("c-pre", grace_s=20)
    status = container_agent.wait_state("c-pre", timeout=60)
    assert (status["state"], status["exit_code"]) == ("PREEMPTED", 75), status
    assert "notice-seen" in container_agent.all_logs("c-pre")
    assert (work / "checkpoints" / "saved").exists()


def test_a_task_ignoring_sigterm_is_killed_after_the_grace_with_its_container(
    container_agent: AgentProcess, podman_engine: ContainerEngine
) -> None:
    run = "trap '' TERM; " + READY + "; while :; do sleep 0.1; done"
    container_agent.api.submit(task("c-kill", image=BUSYBOX_IMAGE, run=run))
    wait_until((container_agent.node_dir / "work" / "ready").exists, 60, "the task to start")
    container_agent.api.cancel("c-kill", grace_s=1.0)
    status = container_agent.wait_state("c-kill", timeout=60)
    assert status["state"] == "CANCELLED"
    assert _task_containers(podman_engine, "c-kill") == []


def test_exec_enters_the_running_container(container_agent: AgentProcess) -> None:
    run = "echo inside > /marker; sleep 300 & " + READY + "; while :; do sleep 0.1; done"
    container_agent.api.submit(task("c-exec", image=BUSYBOX_IMAGE, run=run))
    wait_until((container_agent.node_dir / "work" / "ready").exists, 60, "the task to start")
    result = container_agent.api.exec("c-exec", 'cat /marker; echo "$GPULEASE_TASK_ID"; pwd')
    assert result.exit_code == 0, result.output
    work = container_agent.node_dir / "work"
    assert result.output.split() == ["inside", "c-exec", str(work)]
    container_agent.api.cancel("c-exec", grace_s=5)  # the loop ends; its background sleep too
    assert container_agent.wait_state("c-exec", timeout=60)["state"] == "CANCELLED"
    left = container_agent.api.exec("c-exec", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "sleep 300" not in left.output and "while" in left.output  # the keeper only


def test_a_restarted_agent_adopts_the_running_container(
    container_agent: AgentProcess, podman_engine: ContainerEngine
) -> None:
    work = container_agent.node_dir / "work"
    run = READY + '; while [ ! -e "$GPULEASE_WORK_DIR/go" ]; do sleep 0.1; done; echo done > out'
    container_agent.api.submit(task("c-adopt", image=BUSYBOX_IMAGE, run=run))
    wait_until((work / "ready").exists, 60, "the task to start")
    (name,) = _task_containers(podman_engine, "c-adopt")
    container_agent.kill()  # the agent only: its job and the container live on
    container_agent.start()
    assert container_running(podman_engine, "gpulease-c-adopt-0")
    (work / "go").touch()
    status = container_agent.wait_state("c-adopt", timeout=60)
    assert status["state"] == "SUCCEEDED", container_agent.all_logs("c-adopt")
    assert (work / "out").read_text() == "done\n"
    assert _task_containers(podman_engine, "c-adopt") == [name]


def test_a_node_without_an_engine_fails_the_task_saying_so(
    agent_factory: Callable[..., AgentProcess], tmp_path: Path
) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("bash", "sh", "env"):
        os.symlink(f"/bin/{tool}" if Path(f"/bin/{tool}").exists() else f"/usr/bin/{tool}",
                   bare / tool)  # fmt: skip
    agent = agent_factory(env={"PATH": str(bare)})
    agent.api.submit(task("c-none", image=BUSYBOX_IMAGE, run="true"))
    status = agent.wait_state("c-none", timeout=30)
    assert status["state"] == "FAILED"
    assert "no container engine" in status["detail"], status


def _engine_stores(engine: ContainerEngine) -> list[Path]:
    """The engine's storage: its database, the images, the containers' files."""
    argv = engine.argv("info", "--format", "{{.Store.GraphRoot}} {{.Store.RunRoot}}")
    done = run_engine(engine, argv)
    assert done.returncode == 0, done.stderr
    return [Path(p) for p in done.stdout.split()]


def test_a_secret_reaches_the_task_inside_and_stays_out_of_the_engine(
    container_agent: AgentProcess, podman_engine: ContainerEngine
) -> None:
    canary = secrets.token_hex(16)
    work = container_agent.node_dir / "work"
    digest = 'printf %s "$HF_TOKEN" | busybox sha256sum'
    run = f"{digest} > seen; {READY}; while [ ! -e go ]; do sleep 0.1; done"
    sub = task("c-sec", image=BUSYBOX_IMAGE, run=run, secret_set="ss-c")
    container_agent.api.submit(sub, {"HF_TOKEN": SecretStr(canary), "ODD": SecretStr(ODD)})
    wait_until((work / "ready").exists, 60, "the task to start in its container")
    assert container_agent.api.exec("c-sec", digest).output.split()[0] == sha(canary)
    odd = container_agent.api.exec("c-sec", 'printf %s "$ODD" | busybox sha256sum')
    assert odd.output.split()[0] == sha(ODD)  # exported as it is, inside too
    # while run's exec session lives (an exec --env-file would have it in Podman's database)
    assert [files_holding(store, canary) for store in _engine_stores(podman_engine)] == [[], []]
    (work / "go").touch()
    status = container_agent.wait_state("c-sec", timeout=60)
    assert status["state"] == "SUCCEEDED", container_agent.all_logs("c-sec")
    assert (work / "seen").read_text().split()[0] == sha(canary)
    assert container_agent.api.exec("c-sec", 'echo "[$HF_TOKEN]"').output == "[]\n"  # kept: gone
    (name,) = _task_containers(podman_engine, "c-sec")
    inspected = run_engine(podman_engine, podman_engine.argv("inspect", name))
    assert inspected.returncode == 0 and name in inspected.stdout
    assert canary not in inspected.stdout
    assert [files_holding(store, canary) for store in _engine_stores(podman_engine)] == [[], []]
    container_agent.kill()
    assert files_holding(container_agent.root, canary) == []
