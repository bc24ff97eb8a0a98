"""The end-to-end tests' container image (tests/images.py) works under the engine configured
only through ``CONTAINERS_CONF`` / ``CONTAINERS_STORAGE_CONF``: Debian's python3 imports torch,
scikit-learn and the gpulease under test, ``torchrun`` is on PATH, and the training example
trains in it with its work directory bind-mounted at the same path."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import gpulease

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train"
IMPORTS = (
    "import sys, torch, sklearn, gpulease.train, gpulease; "
    "print(sys.executable, sys.version_info[:2], torch.__version__, gpulease.__file__)"
)


def _podman(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def test_the_image_has_python_torch_sklearn_gpulease_and_torchrun(
    podman_env: dict[str, str], torch_image: str
) -> None:
    info = _podman(podman_env, "info", "--format",
                   "{{.Host.OCIRuntime.Path}} {{.Store.GraphDriverName}}")  # fmt: skip
    runtime, driver = info.stdout.split()
    assert os.path.realpath(runtime) == "/usr/sbin/runc" and driver == "overlay", info.stderr
    script = f"python3 -c '{IMPORTS}' && torchrun --help"
    done = _podman(podman_env, "run", "--rm", "--pull=never", torch_image, "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    site = "/usr/local/lib/python3.11/dist-packages"
    assert first.startswith("/usr/bin/python3 (3, 11) ") and f"{site}/gpulease/" in first
    assert "usage: torchrun" in "\n".join(rest)
    inside = _podman(podman_env, "run", "--rm", "--pull=never", torch_image,
                     "cat", f"{site}/gpulease/__init__.py")  # fmt: skip
    assert inside.stdout == Path(gpulease.__file__).read_text()  # the checkout under test


def test_the_training_example_trains_in_the_image(
    podman_env: dict[str, str], torch_image: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    shutil.copytree(EXAMPLE, work / "train")
    done = _podman(podman_env, "run", "--rm", "--pull=never", "--network", "host",
                   "-v", f"{work}:{work}", "-w", str(work), torch_image, "python3",
                   "train/train_digits.py", "--epochs", "1", "--onnx", "off",
                   "--checkpoint-dir", str(work / "ckpt"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    match = re.search(r"test accuracy ([0-9.]+) \(world size 1\)", done.stdout)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) > 0.5
    assert any((work / "ckpt").iterdir())  # written through the bind mount
