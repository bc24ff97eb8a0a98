"""Task environments: the virtual environment a task's ``setup``, ``run`` and ``exec`` commands
run in, so ``pip install`` in a task never writes into the Python environment gpulease itself
runs from (the user's own venv on the local provider).

A task environment is a venv under the agent's *venv root* (``serve --venv-root``; the local
provider passes ``<its root>/venvs``, shared by all its nodes; Slurm a folder under its shared
root; default ``<node dir>/venvs``), named by a hash of the task's ``setup`` script and of the
agent's Python (executable, version, site dirs). It is made once and reused by every later task
with the same setup, on any node that shares the root::

    <root>/<key>/                     the venv: bin/python → the agent's base interpreter
    <root>/<key>/lib/pythonX.Y/site-packages/_gpulease_agent_site.pth
                                      adds the agent's site dirs (``site.addsitedir``) after the
                                      venv's own, so what the agent can import (torch, gpulease,
                                      pip) the task can too, and what pip installs wins
    <root>/<key>/bin/pip, pip3, pip3.Y, torchrun
                                      launchers: ``python -m pip`` / ``-m torch.distributed.run``
                                      with the venv's python (pip installs into the venv; torchrun
                                      workers see what setup installed)
    <root>/<key>/.gpulease-ready      written last (atomically): the venv is complete
    <root>/<key>.lock                 flock held while the venv is made
    <root>/<key>.setup.lock           flock held by a running ``setup`` (one node at a time)

States: absent → being made (under the lock, no ready marker) → ready. A venv without the
marker is never used: whoever takes the lock next removes it and makes it again. It is made with
``venv.EnvBuilder(with_pip=False)`` (a few milliseconds); only when the agent's Python has no pip
to lend does it run ``ensurepip`` in the venv (seconds, once).

pip run in the venv sees the agent's packages as installed ("Requirement already satisfied")
and refuses to uninstall them ("outside environment"): an upgrade lands in the venv, the
agent's environment is left as it was.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Callable, Iterator
from pathlib import Path

from gpulease.atomic import write_json_atomic

log = logging.getLogger("gpulease.agent")

FORMAT = 1  # bump when the layout changes: old venvs are then left alone, new ones made
READY = ".gpulease-ready"
PTH_NAME = "_gpulease_agent_site.pth"
SETUP_TURN_POLL_S = 0.2


class VenvError(Exception):
    """The task environment could not be made."""


def agent_site_dirs() -> list[str]:
    """The site dirs on this interpreter's ``sys.path`` (its venv's site-packages, the system's
    when it runs without a venv, the user site when enabled), in ``sys.path`` order."""
    candidates = set(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        candidates.add(site.getusersitepackages())
    return [p for p in dict.fromkeys(sys.path) if p in candidates and os.path.isdir(p)]


def venv_key(setup: str | None, site_dirs: list[str] | None = None) -> str:
    """The name of the task environment for ``setup`` under this agent's Python."""
    dirs = agent_site_dirs() if site_dirs is None else site_dirs
    ident = {
        "format": FORMAT,
        "setup": setup or "",
        "python": sys.executable,
        "version": sys.version,
        "site_dirs": dirs,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def venv_path(root: Path, setup: str | None, site_dirs: list[str] | None = None) -> Path:
    """Where the task environment for ``setup`` lives under ``root``."""
    return root / venv_key(setup, site_dirs)


def bin_dir(path: Path) -> Path:
    return path / "bin"


def ensure(path: Path, site_dirs: list[str] | None = None) -> bool:
    """Make the task environment at ``path`` unless it is ready; True when this call made it.
    Safe when several agents call it at once (a file lock; the ready marker written last)."""
    if (path / READY).is_file():
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _flocked(_lock_file(path, "lock")):
            if (path / READY).is_file():
                return False
            if path.exists() or path.is_symlink():
                log.warning("removing the unfinished task environment %s", path)
                shutil.rmtree(path)
            started = time.monotonic()
            _create(path, agent_site_dirs() if site_dirs is None else site_dirs)
    except (OSError, subprocess.SubprocessError) as exc:
        raise VenvError(f"cannot make {path}: {exc}") from exc
    log.info("task environment %s made in %.3f s", path, time.monotonic() - started)
    return True


def setup_turn(
    path: Path, *, give_up: Callable[[], bool], on_wait: Callable[[], None]
) -> int | None:
    """An open file descriptor holding ``path``'s setup lock, for the setup phase to inherit
    (the lock lasts as long as the setup's process does, even if the agent restarts). Waits
    while another node's setup holds it, calling ``on_wait`` once; None when ``give_up()``
    turned true meanwhile."""
    fd = os.open(_lock_file(path, "setup.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        if give_up():
            os.close(fd)
            return None
        if not waited:
            on_wait()
            waited = True
        time.sleep(SETUP_TURN_POLL_S)


def _lock_file(path: Path, suffix: str) -> Path:
    return path.with_name(f"{path.name}.{suffix}")


@contextlib.contextmanager
def _flocked(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _create(path: Path, site_dirs: list[str]) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)
    site_packages = _site_packages(path)
    site_packages.mkdir(parents=True, exist_ok=True)
    # an import line, not plain paths: addsitedir also runs the .pth files found there
    # (editable installs, such as gpulease's own in a development checkout)
    call = f"import site; list(map(site.addsitedir, {site_dirs!r}))\n"
    (site_packages / PTH_NAME).write_text(call, encoding="utf-8")
    python = bin_dir(path) / "python"
    if importlib.util.find_spec("pip") is None:
        _ensurepip(python)
    else:
        for name in _pip_names():
            _launcher(bin_dir(path) / name, python, "pip")
    _launcher(bin_dir(path) / "torchrun", python, "torch.distributed.run")
    _write_ready(path, site_dirs)


def _site_packages(path: Path) -> Path:
    """``path``'s purelib directory, computed as ``venv`` itself does (the ``venv`` scheme)."""
    where = str(path)
    names = ("base", "platbase", "installed_base", "installed_platbase")
    return Path(sysconfig.get_path("purelib", "venv", dict.fromkeys(names, where)))


def _pip_names() -> list[str]:
    major, minor = sys.version_info[:2]
    return ["pip", f"pip{major}", f"pip{major}.{minor}"]


def _launcher(target: Path, python: Path, module: str) -> None:
    """A small shell script running ``python -m module`` (pip replaces it when it installs the
    package's own script into the venv)."""
    if target.exists():
        return
    target.write_text(
        f'#!/bin/sh\nexec {shlex.quote(str(python))} -m {module} "$@"\n', encoding="utf-8"
    )
    target.chmod(0o755)


def _ensurepip(python: Path) -> None:
    """The agent's Python has no pip to lend: give the venv its own (a few seconds, once). A
    Python without ensurepip (Debian without python3-venv) leaves the venv without pip."""
    done = subprocess.run(
        [str(python), "-m", "ensurepip", "--default-pip"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["?"]
        log.warning("no pip in the task environment (ensurepip failed: %s)", why[0])


def _write_ready(path: Path, site_dirs: list[str]) -> None:
    info = {
        "format": FORMAT,
        "python": sys.executable,
        "version": sys.version,
        "site_dirs": site_dirs,
        "created_at": time.time(),
    }
    write_json_atomic(path / READY, info)
