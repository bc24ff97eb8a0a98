"""The system components the test suite needs beyond its Python packages, in one table: what
each one is, how to tell it is installed, and the Debian packages that bring it.

Two users of the table:

- ``scripts/test-env.sh`` (run by ``make test`` before pytest, and so by ``.ci/run``) runs
  ``python3 -m tests.components install``: as root it installs whatever is missing with
  apt-get; as any other user it prints one line per component it cannot get (its tests will
  skip). Nothing to do: it returns in well under a second. Under ``CI=true`` a component it
  cannot get is an error (exit 1).
- fixtures call :func:`require` (and :func:`require_root`): a missing component skips the test
  with ONE line naming the Debian package — except under ``CI=true``, where nothing may skip
  for a missing component: the test fails with that line instead.

``GPULEASE_TEST_PRETEND_MISSING=slurmrestd,openssh-server`` (a comma list of component names,
or ``all``) makes these components count as missing, in the tests and in ``install`` (which
then reports them instead of installing them), and ``GPULEASE_TEST_PRETEND_NOT_ROOT=1`` makes
:func:`require_root` behave as for another user: to see the skip (or, with ``CI=true``, the
failure) lines on a machine that has everything. Test-suite knobs only; nothing in
``src/`` reads them.

This module needs only the standard library at import (the installer runs before the virtual
environment's packages matter); pytest is imported inside :func:`require`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

APT_TIMEOUT_S = 900


def _commands(*names: str) -> Callable[[], bool]:
    return lambda: all(shutil.which(n, path=_SEARCH_PATH) for n in names)


#: where the tests look for system commands: PATH plus the sbin directories (a non-root
#: user's PATH often lacks them, but the binaries run all the same)
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin:/usr/sbin:/sbin"])


def _files(*paths: str) -> bool:
    return all(os.path.exists(p) for p in paths)


def _postgres() -> bool:
    found = [shutil.which("initdb"), *glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    if not any(p and os.path.exists(os.path.join(os.path.dirname(p), "pg_ctl")) for p in found):
        return False
    try:
        pwd.getpwnam("postgres")  # as root, initdb runs as this user
    except KeyError:
        return os.geteuid() != 0
    return True


def _jwt_plugin() -> bool:
    return bool(glob.glob("/usr/lib/*/slurm-wlm/auth_jwt.so"))


@dataclass(frozen=True)
class Component:
    """A system component: a name (its main Debian package), what it is, and its packages."""

    name: str
    what: str
    packages: tuple[str, ...]
    present: Callable[[], bool]


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in (
        Component("postgresql", "the PostgreSQL server (initdb, pg_ctl)", ("postgresql",),
                  _postgres),
        Component("slurm-wlm", "the Slurm daemons and commands (slurmctld, slurmd, munged)",
                  ("slurm-wlm", "munge"), _commands("slurmctld", "slurmd", "sbatch", "munged")),
        Component("slurmrestd", "slurmrestd with JWT auth", ("slurmrestd", "slurm-wlm-jwt-plugin"),
                  lambda: _commands("slurmrestd", "scontrol")() and _jwt_plugin()),
        Component("openssh-server", "sshd and ssh", ("openssh-server", "openssh-client"),
                  _commands("sshd", "ssh", "ssh-keygen")),
        Component("iproute2", "ip (network namespaces)", ("iproute2",), _commands("ip")),
        Component("prometheus", "the Prometheus server and promtool", ("prometheus",),
                  _commands("prometheus", "promtool")),
        Component("chromium", "headless Chromium and its WebDriver (the dashboard's browser "
                  "test)", ("chromium", "chromium-driver"), _commands("chromium", "chromedriver")),
        Component("podman", "Podman with the runc runtime, a static busybox and Debian's "
                  "python3.11 and procps (the container tests build their images from them: "
                  "tests/images.py)",
                  ("podman", "runc", "busybox-static", "python3", "procps"),
                  lambda: _commands("podman", "runc", "busybox")() and _files(
                      "/usr/bin/python3.11", "/usr/bin/ps", "/usr/bin/dpkg-query")),
    )
}  # fmt: skip


def _pretended() -> set[str]:
    names = {n.strip() for n in os.environ.get("GPULEASE_TEST_PRETEND_MISSING", "").split(",")}
    return set(COMPONENTS) if "all" in names else names & set(COMPONENTS)


def is_present(name: str) -> bool:
    return name not in _pretended() and COMPONENTS[name].present()


def missing_line(name: str) -> str:
    """The one line that says a component is missing and which Debian package brings it."""
    c = COMPONENTS[name]
    label = "package" if len(c.packages) == 1 else "packages"
    packages = " ".join(c.packages)
    return f"needs {c.what}: Debian {label} {packages} (`make test` as root installs it)"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """Skip the calling test with ``reason`` — or, under ``CI=true``, fail it."""
    import pytest

    if in_ci():
        pytest.fail(f"{reason} [CI=true: nothing may skip for a missing component]", pytrace=False)
    pytest.skip(reason)


def require(*names: str) -> None:
    """Skip (under ``CI=true``: fail) unless every named component is installed."""
    for name in names:
        if not is_present(name):
            unavailable(missing_line(name))


def is_root() -> bool:
    return os.geteuid() == 0 and os.environ.get("GPULEASE_TEST_PRETEND_NOT_ROOT") != "1"


def require_root(why: str) -> None:
    """Skip (under ``CI=true``: fail) unless this process runs as root."""
    if not is_root():
        unavailable(f"needs root: {why}")


# ---- the installer (scripts/test-env.sh) ----------------------------------------------------


def _apt(*args: str) -> int:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    argv = ["apt-get", "-qq", "-o", "DPkg::Lock::Timeout=300", *args]
    try:
        done = subprocess.run(
            argv, env=env, stdout=subprocess.DEVNULL, timeout=APT_TIMEOUT_S, check=False
        )
        return done.returncode
    except subprocess.TimeoutExpired:
        print(f"test-env: apt-get {args[0]} did not finish in {APT_TIMEOUT_S} s", file=sys.stderr)
        return 1


def _ensure_postgres_user() -> None:
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        argv = ["useradd", "--system", "--home", "/var/lib/postgresql", "--shell", "/bin/bash",
                "postgres"]  # fmt: skip
        subprocess.run(argv, timeout=60, check=False)


def install() -> int:
    """Install what is missing (root, apt-get) or say what is; 0 when the suite has it all."""
    pretended = _pretended()
    wanted = [n for n in COMPONENTS if n not in pretended and not COMPONENTS[n].present()]
    if wanted and os.geteuid() == 0 and shutil.which("apt-get"):
        packages = sorted({p for n in wanted for p in COMPONENTS[n].packages})
        print(f"test-env: installing {' '.join(packages)} (apt-get)", file=sys.stderr)
        if _apt("update") == 0:
            _apt("install", "-y", *packages)
        if "postgresql" in wanted:
            _ensure_postgres_user()
    lacking = [n for n in COMPONENTS if not is_present(n)]
    for name in lacking:
        print(f"test-env: {name}: {missing_line(name)}; its tests will skip", file=sys.stderr)
    if lacking and in_ci():
        print("test-env: CI=true: every component must be there", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        return install()
    if argv == ["check"]:
        lacking = [n for n in COMPONENTS if not is_present(n)]
        for name in lacking:
            print(f"{name}: {missing_line(name)}")
        return 1 if lacking else 0
    print("usage: python3 -m tests.components install|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
