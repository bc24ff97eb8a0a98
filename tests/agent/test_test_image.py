"""The end-to-end tests' container image (tests/images.py) works under the engine configured
only through ``CONTAINERS_CONF`` / ``CONTAINERS_STORAGE_CONF``: Debian's python3 imports torch,
scikit-learn and the gpulease under test, ``torchrun`` is on PATH. (The training example in the
image, end to end: tests/cli/test_container_tasks.py.)"""

from __future__ import annotations

import os
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
