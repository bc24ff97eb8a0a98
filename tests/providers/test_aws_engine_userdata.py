"""The container engine step of a node's user-data (a task with an image): in the script only
then (the CDI step only on GPU nodes), valid bash, and — run by real bash on a ``PATH`` this
test builds — it leaves a node with an engine alone, installs one with the package manager it
finds (stand-in ``apt-get`` / ``nvidia-ctk`` scripts record how they were called: nothing here
may install packages), and never fails the boot."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr

from gpulease.providers.aws.userdata import engine_script, user_data

TOKEN = SecretStr("s3cr3t")


def _bash_n(script: str) -> None:
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


@pytest.mark.parametrize(("engine", "gpus"), [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("install", ["server", "pypi"])
def test_the_engine_step_is_there_only_for_a_task_with_an_image(
    engine: bool, gpus: bool, install: str
) -> None:
    script = user_data(TOKEN, 7070, install=install, engine=engine, gpus=gpus)
    _bash_n(script)
    assert ("command -v podman" in script or "have podman" in script) is engine
    assert ("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in script) is gpus
    assert script.rstrip().endswith("touch $G/ready")
    if engine and install == "pypi":  # the engine is there before the agent starts
        assert script.index("have podman") < script.index("gpulease.agent")


def _path(tmp_path: Path, *tools: str) -> Path:
    """A bin directory holding links to ``tools`` (and what the script itself calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("tee", "mkdir", "dirname", *tools):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    return bin_dir


def _stand_in(bin_dir: Path, name: str, body: str) -> Path:
    calls = bin_dir.parent / f"{name}.calls"
    path = bin_dir / name
    path.write_text(f'#!/bin/bash\necho "$*" >> {calls}\n{body}\n')
    path.chmod(0o755)
    return calls


def _run(script: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(bin_dir), "HOME": str(bin_dir.parent)}
    wrapped = f"set -euo pipefail\numask 077\n{script}echo boot-went-on\n"
    return subprocess.run(["/bin/bash", "-c", wrapped], env=env, capture_output=True,
                          text=True, check=False, timeout=30)  # fmt: skip


@pytest.mark.skipif(shutil.which("podman") is None, reason="needs podman on PATH")
def test_a_node_with_podman_is_left_alone(tmp_path: Path) -> None:
    bin_dir = _path(tmp_path, "podman")
    calls = _stand_in(bin_dir, "apt-get", "exit 1")
    log = tmp_path / "engine.log"
    done = _run(engine_script(gpus=False, log=str(log)), bin_dir)
    assert done.returncode == 0 and done.stdout == "boot-went-on\n"
    assert f"gpulease engine: found {bin_dir}/podman" in done.stderr
    assert log.read_text() == f"gpulease engine: found {bin_dir}/podman\n"
    assert not calls.exists()


def test_a_node_without_an_engine_gets_podman_from_apt_and_a_cdi_spec(tmp_path: Path) -> None:
    bin_dir = _path(tmp_path)
    podman = f'if [ "$1" = install ]; then printf "#!/bin/bash\\n" > {bin_dir}/podman; ' + (
        f"/bin/chmod 755 {bin_dir}/podman; fi"
    )
    apt = _stand_in(bin_dir, "apt-get", podman)
    spec = tmp_path / "etc" / "cdi" / "nvidia.yaml"
    ctk = _stand_in(bin_dir, "nvidia-ctk", 'echo "cdi: x" > "${3#--output=}"')
    log = tmp_path / "engine.log"
    done = _run(engine_script(gpus=True, log=str(log), cdi=str(spec)), bin_dir)
    assert done.returncode == 0 and done.stdout == "boot-went-on\n"
    assert apt.read_text() == "update -qq\ninstall -y -qq podman\n"
    assert ctk.read_text() == f"cdi generate --output={spec}\n"
    assert spec.read_text() == "cdi: x\n"
    lines = [line for line in log.read_text().splitlines() if line.startswith("gpulease")]
    assert lines == [f"gpulease engine: installed {bin_dir}/podman",
                     f"gpulease engine: wrote the CDI spec {spec}"]  # fmt: skip
    assert done.stderr.splitlines() == lines


def test_a_node_where_nothing_installs_still_boots_and_says_so(tmp_path: Path) -> None:
    bin_dir = _path(tmp_path)
    apt = _stand_in(bin_dir, "apt-get", "exit 100")
    dnf = _stand_in(bin_dir, "dnf", "exit 1")
    log = tmp_path / "engine.log"
    done = _run(engine_script(gpus=True, log=str(log)), bin_dir)
    assert done.returncode == 0 and done.stdout == "boot-went-on\n"
    assert apt.read_text() == "update -qq\ninstall -y -qq podman\n"
    assert dnf.read_text() == "install -y -q podman\ninstall -y -q docker\n"
    assert done.stderr.splitlines() == [
        "gpulease engine: no container engine could be installed (tried apt-get, dnf, yum)",
        "gpulease engine: no nvidia-ctk: no CDI spec, so Podman passes no GPUs to containers",
    ]
    assert os.stat(log).st_size > 0
