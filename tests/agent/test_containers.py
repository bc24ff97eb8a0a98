"""The agent's container engine driver (gpulease.agent.containers) against a real Podman.

No registry is reachable: the image is built here, ``podman import`` of a tar holding a static
busybox (enough for ``sh -c``). Podman runs as root with the runc runtime, its storage in a
temporary directory, and a ``containers.conf`` with ``default_ulimits = []`` (the setrlimit of
the default configuration fails here). The command-line builders are checked without Podman.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulease.agent import jobproc
from gpulease.agent.containers import (
    ContainerEngine,
    ContainerError,
    ContainerPhase,
    RegistryCredentials,
    container_name,
    container_running,
    detect_engine,
    ensure_image,
    exec_argv,
    phase_script,
    registry_of,
    remove_argv,
    run_argv,
    run_engine,
    stop_argv,
    write_env_file,
)
from tests.components import require, require_root
from tests.waiting import wait_until

IMAGE = "localhost/gpulease-test-busybox:1"
WAIT_READY = "touch ready; while :; do sleep 0.1; done"
TRAP_75 = "trap 'touch trapped; exit 75' TERM; " + WAIT_READY


def _busybox_tar(path: Path) -> None:
    busybox = shutil.which("busybox")
    assert busybox
    with tarfile.open(path, "w") as tar:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in (
            "sh",
            "cat",
            "echo",
            "sleep",
            "touch",
            "test",
            "[",
            "kill",
            "ls",
            "pwd",
            "tr",
        ):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerEngine]:
    require("podman")
    require_root("Podman runs rootful here (runc)")
    root = tmp_path_factory.mktemp("podman")
    # Podman refuses a runroot longer than 50 characters; pytest's per-worker temp paths are
    # longer than that under xdist, so the runroot gets a short directory of its own
    short = Path(tempfile.mkdtemp(prefix="glpod-", dir="/tmp"))
    conf = root / "containers.conf"
    conf.write_text("[containers]\ndefault_ulimits = []\n")
    engine = ContainerEngine(
        kind="podman",
        executable=shutil.which("podman") or "podman",
        global_args=("--runtime", shutil.which("runc", path="/usr/sbin:/usr/bin") or "runc",
                     "--root", str(root / "storage"), "--runroot", str(short / "run"),
                     "--storage-driver", "vfs"),
        env={"CONTAINERS_CONF": str(conf)},
    )  # fmt: skip
    tar = root / "busybox.tar"
    _busybox_tar(tar)
    done = run_engine(engine, engine.argv("import", str(tar), IMAGE))
    assert done.returncode == 0, done.stderr
    yield engine
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    work = tmp_path / "work"
    (work / "checkpoints").mkdir(parents=True)
    yield work


def _phase(work: Path, env_file: Path, script: str, task_id: str) -> ContainerPhase:
    return ContainerPhase(
        image=IMAGE,
        task_id=task_id,
        work_dir=work,
        checkpoint_dir=work / "checkpoints",
        env_file=env_file,
        command=("sh", "-c", script),
        stop_timeout_s=5,
    )


def test_a_phase_runs_in_the_container_with_its_work_dir_and_env(
    podman: ContainerEngine, work: Path
) -> None:
    (work / "input.txt").write_text("from the host\n")
    env_file = write_env_file({"GREETING": "hello container", "TOKEN": "s3cret"}, work.parent)
    script = 'cat input.txt > seen.txt; echo "$GREETING $(pwd)" >> seen.txt; exit 7'
    argv = run_argv(podman, _phase(work, env_file, script, "t-env"))
    assert not any("s3cret" in a or "hello container" in a for a in argv)
    done = run_engine(podman, argv, timeout_s=60)
    assert done.returncode == 7, done.stderr
    assert (work / "seen.txt").read_text() == f"from the host\nhello container {work}\n"


def test_sigterm_to_the_engine_process_reaches_the_task_and_exec_joins_it(
    podman: ContainerEngine, work: Path
) -> None:
    env_file = write_env_file({}, work.parent)
    script = TRAP_75
    phase = _phase(work, env_file, script, "t-term")
    proc = subprocess.Popen(
        run_argv(podman, phase), env=podman.process_env(os.environ), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until((work / "ready").exists, 30, "the task to start in its container")
        name = container_name("t-term")
        joined = run_engine(podman, exec_argv(podman, name, ["sh", "-c", "echo in > execd"]))
        assert joined.returncode == 0, joined.stderr
        assert (work / "execd").read_text() == "in\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 75
        assert (work / "trapped").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stop_sends_the_stop_signal_to_the_task(podman: ContainerEngine, work: Path) -> None:
    env_file = write_env_file({}, work.parent)
    script = TRAP_75
    proc = subprocess.Popen(
        run_argv(podman, _phase(work, env_file, script, "t-stop")),
        env=podman.process_env(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until((work / "ready").exists, 30, "the task to start in its container")
        stopped = run_engine(podman, stop_argv(podman, container_name("t-stop"), 5))
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=30) == 75
        assert (work / "trapped").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_agents_phase_wrapper_runs_a_container_and_records_its_exit(
    podman: ContainerEngine, work: Path
) -> None:
    """The runner's path: jobproc's wrapper runs the container's command line in the phase's
    process group; a TERM to the group (a preemption) reaches the task, the exit file has 75."""
    env_file = write_env_file({"RANK_NAME": "worker 0"}, work.parent)
    script = "trap 'echo \"$RANK_NAME\" > trapped; exit 75' TERM; " + WAIT_READY
    line = phase_script(podman, _phase(work, env_file, script, "t-wrapper"))
    log, exit_file = work.parent / "task.log", work.parent / "run.exit"
    proc = jobproc.spawn_phase(
        line, cwd=work, env=podman.process_env(os.environ), log_path=log, exit_path=exit_file
    )
    try:
        wait_until((work / "ready").exists, 30, "the task to start in its container")
        assert jobproc.signal_group(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 75
        assert jobproc.read_exit_file(exit_file) == 75
        assert (work / "trapped").read_text() == "worker 0\n"
    finally:
        jobproc.signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_sigkill_of_the_group_leaves_the_container_and_remove_ends_it(
    podman: ContainerEngine, work: Path
) -> None:
    env_file = write_env_file({}, work.parent)
    line = phase_script(podman, _phase(work, env_file, "touch ready; sleep 60", "t-kill"))
    proc = jobproc.spawn_phase(
        line, cwd=work, env=podman.process_env(os.environ), log_path=work.parent / "log",
        exit_path=work.parent / "exit",
    )  # fmt: skip
    name = container_name("t-kill")
    try:
        wait_until((work / "ready").exists, 30, "the task to start in its container")
        jobproc.signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        assert container_running(podman, name)
    finally:
        removed = run_engine(podman, remove_argv(podman, name))
    assert removed.returncode == 0, removed.stderr
    assert not container_running(podman, name)


def test_a_present_image_is_not_pulled_and_a_failed_login_hides_the_password(
    podman: ContainerEngine,
) -> None:
    assert ensure_image(podman, IMAGE) is False
    creds = RegistryCredentials("localhost:1", "someone", "hunter2-password")
    assert "hunter2" not in repr(creds)
    with pytest.raises(ContainerError) as failed:
        ensure_image(podman, "localhost:1/absent/image:1", creds)
    message = str(failed.value)
    assert "registry login for image localhost:1/absent/image:1 failed" in message
    assert "hunter2" not in message


# ---- the builders, without an engine ----------------------------------------------------------


def test_run_argv_passes_gpus_per_engine_and_mounts_an_outside_checkpoint_dir(
    tmp_path: Path,
) -> None:
    phase = ContainerPhase(
        image="docker.io/library/python:3.12",
        task_id="job 1/a",
        work_dir=tmp_path / "work",
        checkpoint_dir=tmp_path / "ckpt",
        env_file=tmp_path / "env",
        command=("sh", "-c", "true"),
        gpus=True,
    )
    podman = run_argv(ContainerEngine("podman", "podman"), phase)
    docker = run_argv(ContainerEngine("docker", "/usr/bin/docker"), phase)
    assert podman[podman.index("--device") + 1] == "nvidia.com/gpu=all"
    assert docker[docker.index("--gpus") + 1] == "all"
    assert podman[podman.index("--name") + 1] == "gpulease-job_1_a-run"
    assert f"{tmp_path / 'ckpt'}:{tmp_path / 'ckpt'}" in podman
    assert podman[podman.index("-w") + 1] == str(tmp_path / "work")
    assert podman[-4:] == ["docker.io/library/python:3.12", "sh", "-c", "true"]


def test_env_file_is_private_and_refuses_a_value_it_cannot_hold(tmp_path: Path) -> None:
    path = write_env_file({"A": "1 2 'x'", "B": ""}, tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "A=1 2 'x'\nB=\n"
    with pytest.raises(ValueError, match="environment variable KEY: a value with a newline"):
        write_env_file({"KEY": "line1\nline2"}, tmp_path)


def test_detect_engine_prefers_podman_and_registry_of_reads_the_host(tmp_path: Path) -> None:
    for name in ("docker", "podman"):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    found = detect_engine(path=str(tmp_path))
    assert found is not None and found.kind == "podman"
    (tmp_path / "podman").unlink()
    found = detect_engine(path=str(tmp_path))
    assert found is not None and found.executable == str(tmp_path / "docker")
    assert detect_engine(path=str(tmp_path / "nothing")) is None
    assert registry_of("ghcr.io/org/img:1") == "ghcr.io"
    assert registry_of("localhost:5000/img") == "localhost:5000"
    assert registry_of("library/python:3.12") == "docker.io"
    assert registry_of("python") == "docker.io"
