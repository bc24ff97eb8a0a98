"""The agent's container engine driver (gpulease.agent.containers) against a real Podman: an
image present is not pulled, a failed registry login never shows the password. The command-line
builders (of the driver and of a task's container) are checked without Podman; a task's
container on a real agent is tests/agent/test_agent_containers.py.

No registry is reachable: the image is built here, ``podman import`` of a tar holding a static
busybox, in this session's Podman (``podman_engine``, ``busybox_image``: tests/images.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.agent.containers import (
    ContainerEngine,
    ContainerError,
    RegistryCredentials,
    container_name,
    detect_engine,
    ensure_image,
    registry_of,
)
from gpulease.agent.task_container import ContainerMounts, TaskContainer

pytestmark = pytest.mark.xdist_group("podman")


def test_a_present_image_is_not_pulled_and_a_failed_login_hides_the_password(
    podman_engine: ContainerEngine, busybox_image: str
) -> None:
    podman = podman_engine
    assert ensure_image(podman, busybox_image) is False
    creds = RegistryCredentials("localhost:1", "someone", "hunter2-password")
    assert "hunter2" not in repr(creds)
    with pytest.raises(ContainerError) as failed:
        ensure_image(podman, "localhost:1/absent/image:1", creds)
    message = str(failed.value)
    assert "registry login for image localhost:1/absent/image:1 failed" in message
    assert "hunter2" not in message


# ---- the builders, without an engine ----------------------------------------------------------


def test_a_task_container_mounts_its_dirs_passes_gpus_per_engine_and_execs_phases(
    tmp_path: Path,
) -> None:
    mounts = ContainerMounts(tmp_path / "work", tmp_path / "work" / "ckpt", tmp_path / "task")
    made = {
        kind: TaskContainer(ContainerEngine(kind, kind), image="docker.io/library/python:3.12",
                            name=container_name("job 1/a", 2), task_id="job 1/a",
                            node_dir=tmp_path, mounts=mounts, gpus=True,
                            env={"IPS": "10.0.0.1\n10.0.0.2"})
        for kind in ("podman", "docker")
    }  # fmt: skip
    podman = made["podman"].run_argv()
    docker = made["docker"].run_argv()
    assert podman[podman.index("--device") + 1] == "nvidia.com/gpu=all"
    assert docker[docker.index("--gpus") + 1] == "all"
    assert podman[podman.index("--name") + 1] == "gpulease-job_1_a-2"
    volumes = [podman[i + 1] for i, arg in enumerate(podman) if arg == "-v"]
    assert volumes == [f"{d}:{d}" for d in (tmp_path / "work", tmp_path / "task")]  # ckpt inside
    assert podman[podman.index("-w") + 1] == str(tmp_path / "work")
    named = [podman[i + 1] for i, arg in enumerate(podman) if arg == "--env"]
    assert named == ["GPULEASE_CONTAINER", "GPULEASE_CONTAINER_ENGINE", "IPS"]
    assert not any("10.0.0.1" in arg for arg in podman)  # values only in the engine's env
    assert "--detach" in podman and "--network" in podman and "--init" in podman
    assert podman[-4] == "docker.io/library/python:3.12" and "trap ''" in podman[-1]
    phase = made["podman"].exec_argv("echo hi")
    assert phase[:5] == ["podman", "exec", "-w", str(tmp_path / "work"), "gpulease-job_1_a-2"]
    assert phase[-1] == "echo hi"


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
