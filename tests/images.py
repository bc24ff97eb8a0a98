"""The container image the end-to-end tests run tasks in (issue 19), and the Podman it lives in.

No registry is reachable here, so the image is made on the test machine, in two layers:

- the **base** (``localhost/gpulease-test-torch-base:1``, ~1.1 GB): a Debian userland and
  Debian's ``python3`` with torch, numpy, scipy, scikit-learn and gpulease's runtime
  requirements (what goes in: ``tests/image_rootfs.py``), streamed as a tar into ``podman
  import``. It is built once per machine into a storage of its own under the cache directory
  (``/var/tmp/gpulease-test-images/<key>/storage``, or ``$GPULEASE_TEST_IMAGE_CACHE``), keyed on
  the versions of everything in it; every test session reads it from there as a read-only
  ``additionalimagestores`` entry, so nothing is copied. A file lock makes one process build it
  while the others (pytest-xdist workers, other sessions) wait;
- **gpulease** (``localhost/gpulease-test-torch:1``): the package from the checkout under test,
  ``ADD``-ed on top by ``podman build`` in the session's own storage (about a second).

Podman is configured only through the two variables of :func:`write_podman_conf`
(``CONTAINERS_CONF``, ``CONTAINERS_STORAGE_CONF``), which is how the tests hand the same engine
to a server or an agent (its environment): the ``runc`` runtime, ``default_ulimits = []`` (the
default configuration's setrlimit fails here), the ``overlay`` driver, a storage in a temporary
directory and a runroot in a short one (Podman refuses a runroot over 50 characters).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpulease
from gpulease.agent.containers import ContainerEngine, detect_engine, run_engine
from tests import image_rootfs
from tests.components import require, require_root, unavailable

IMAGE = "localhost/gpulease-test-torch:1"
BASE_IMAGE = "localhost/gpulease-test-torch-base:1"
CACHE_ENV = "GPULEASE_TEST_IMAGE_CACHE"
DEFAULT_CACHE = Path("/var/tmp/gpulease-test-images")
#: bump when what goes into the base changes in a way neither its inputs' versions nor
#: tests/image_rootfs.py (whose text is part of the key) show
LAYOUT_VERSION = "1"
PODMAN_TIMEOUT_S = 600.0
UNUSED_CACHE_S = 7 * 24 * 3600  # a base no session used for this long is deleted


@dataclass(frozen=True)
class PodmanStorage:
    """One Podman configuration: the environment that selects it, and its directories."""

    env: Mapping[str, str]
    graphroot: Path
    runroot: Path


def write_podman_conf(
    directory: Path, graphroot: Path, additional_stores: tuple[Path, ...] = ()
) -> PodmanStorage:
    """Write ``containers.conf`` and ``storage.conf`` into ``directory`` for a storage at
    ``graphroot`` (and a new short runroot under /tmp), reading images also from the read-only
    ``additional_stores``. Podman's ``tmp_dir`` (exit codes, locks of the running containers)
    is the storage's own too: two sessions sharing the default ``/run/libpod`` lose exit
    codes (``podman run --rm`` fails with "no such exit code", seen with two xdist workers)."""
    short = Path(tempfile.mkdtemp(prefix="glpod-", dir="/tmp"))
    runroot = short / "run"
    containers = ('[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'
                  f'tmp_dir = "{short / "libpod"}"\n')  # fmt: skip
    stores = "".join(f'  "{s}",\n' for s in additional_stores)
    storage = (f'[storage]\ndriver = "overlay"\ngraphroot = "{graphroot}"\n'
               f'runroot = "{runroot}"\n\n[storage.options]\n'
               f"additionalimagestores = [\n{stores}]\n")  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "containers.conf").write_text(containers)
    (directory / "storage.conf").write_text(storage)
    env = {"CONTAINERS_CONF": str(directory / "containers.conf"),
           "CONTAINERS_STORAGE_CONF": str(directory / "storage.conf")}  # fmt: skip
    return PodmanStorage(env=env, graphroot=graphroot, runroot=runroot)


def podman(
    storage: PodmanStorage, *args: str, timeout_s: float = PODMAN_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run ``podman ARGS`` under ``storage``'s configuration (output captured, not checked)."""
    return subprocess.run(
        ["podman", *args], env={**os.environ, **storage.env}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip


def _checked(storage: PodmanStorage, *args: str) -> str:
    done = podman(storage, *args)
    if done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def reset(storage: PodmanStorage) -> None:
    """Remove every container and image of ``storage``, unmount it and delete its directories
    (``podman system reset``); its read-only additional stores are left as they are."""
    podman(storage, "rm", "--all", "--force", "--time", "0")
    podman(storage, "system", "reset", "--force")
    shutil.rmtree(storage.graphroot, ignore_errors=True)
    shutil.rmtree(storage.runroot.parent, ignore_errors=True)


# ---- the base image, cached per machine ------------------------------------------------------


@dataclass(frozen=True)
class BaseInputs:
    """What the base is made of: the Debian packages and Python distributions, by version."""

    packages: dict[str, str]
    dists: list[md.Distribution]

    @property
    def key(self) -> str:
        rules = hashlib.sha256(Path(image_rootfs.__file__).read_bytes()).hexdigest()
        lines = [f"layout {LAYOUT_VERSION} {rules}", f"python {sys.version_info[:2]}"]
        lines += [f"deb {name} {version}" for name, version in self.packages.items()]
        lines += [f"dist {d.metadata['Name']} {d.version}" for d in self.dists]
        return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def base_inputs() -> BaseInputs:
    roots = [*image_rootfs.PYTHON_ROOTS, *image_rootfs.gpulease_requirements()]
    return BaseInputs(image_rootfs.debian_closure(), image_rootfs.python_closure(roots))


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_base_store(inputs: BaseInputs, root: Path | None = None) -> Path:
    """The storage holding :data:`BASE_IMAGE` for ``inputs``: built unless the cache has it
    (under a lock: one builder, the others wait). Old bases nobody used for a week go."""
    root = root or cache_root()
    entry = root / inputs.key
    with _locked(root / "lock"):
        if not (entry / "ready").exists():
            _remove_store(entry)  # a build that did not finish
            _build_base(inputs, entry)
            (entry / "ready").write_text(f"{BASE_IMAGE}\n")
        os.utime(entry / "ready")
        _prune(root, keep=entry)
    return entry / "storage"


def _build_base(inputs: BaseInputs, entry: Path) -> None:
    """Write the base's tar next to its storage (``podman import -`` would copy standard input
    to a file first anyway), import it, delete it."""
    entry.mkdir(parents=True)
    tar = entry / "base.tar"
    with tempfile.TemporaryDirectory(prefix="gpulease-image-conf-") as conf:
        storage = write_podman_conf(Path(conf), entry / "storage")
        try:
            with open(tar, "wb") as f:
                image_rootfs.write_base_tar(f, inputs.packages, inputs.dists)
            _checked(storage, "import", "--change", "CMD=/bin/bash", str(tar), BASE_IMAGE)
        finally:
            tar.unlink(missing_ok=True)
            shutil.rmtree(storage.runroot.parent, ignore_errors=True)


def _remove_store(entry: Path) -> None:
    """Delete ``entry``, unmounting first whatever an interrupted ``podman`` left mounted in it
    (its overlay driver bind-mounts its own directory)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        points = [line.split()[4] for line in f]
    for point in sorted((p for p in points if Path(p).is_relative_to(entry)), reverse=True):
        subprocess.run(["umount", point], capture_output=True, timeout=60, check=False)
    shutil.rmtree(entry, ignore_errors=True)


def _prune(root: Path, keep: Path) -> None:
    for ready in root.glob("*/ready"):
        entry = ready.parent
        if entry != keep and time.time() - ready.stat().st_mtime > UNUSED_CACHE_S:
            ready.unlink()
            _remove_store(entry)


# ---- the session's image ----------------------------------------------------------------------


def build_image(storage: PodmanStorage, package_dir: Path, context: Path) -> str:
    """Add the gpulease package at ``package_dir`` on top of :data:`BASE_IMAGE` (which
    ``storage`` reads from its additional store) as :data:`IMAGE`; its name."""
    context.mkdir(parents=True, exist_ok=True)
    with open(context / "gpulease.tar", "wb") as f:
        image_rootfs.write_gpulease_tar(f, package_dir)
    (context / "Containerfile").write_text(f"FROM {BASE_IMAGE}\nADD gpulease.tar /\n")
    _checked(storage, "build", "--pull=never", "--quiet", "--tag", IMAGE, str(context))
    return IMAGE


# ---- fixtures (re-exported by tests/conftest.py) ---------------------------------------------


def require_image_build() -> None:
    """Skip (under ``CI=true``: fail) where the test image cannot be made: it needs a rootful
    Podman with runc, Debian's python3.11 and a Python 3.11 running the tests (its wheels are
    copied into the image)."""
    require("podman")
    require_root("Podman runs rootful here (runc)")
    if sys.version_info[:2] != (3, 11):
        unavailable("the test image copies this environment's cp311 wheels: needs Python 3.11")


@pytest.fixture(scope="session")
def podman_storage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanStorage]:
    """This session's Podman: its own storage (deleted at the end, nothing left mounted), the
    cached base image's store read-only beside it."""
    require_image_build()
    base = ensure_base_store(base_inputs())
    root = tmp_path_factory.mktemp("podman-image")
    storage = write_podman_conf(root / "conf", root / "storage", (base,))
    yield storage
    reset(storage)


@pytest.fixture(scope="session")
def podman_env(podman_storage: PodmanStorage) -> dict[str, str]:
    """``CONTAINERS_CONF`` and ``CONTAINERS_STORAGE_CONF`` of this session's Podman: put them in
    the environment of a server or an agent and its ``podman`` finds :func:`torch_image`."""
    return dict(podman_storage.env)


@pytest.fixture(scope="session")
def torch_image(podman_storage: PodmanStorage, tmp_path_factory: pytest.TempPathFactory) -> str:
    """:data:`IMAGE` in this session's Podman, with gpulease from the checkout under test."""
    package_dir = Path(gpulease.__file__).parent
    return build_image(podman_storage, package_dir, tmp_path_factory.mktemp("image-context"))


BUSYBOX_IMAGE = "localhost/gpulease-test-busybox:1"
BUSYBOX_APPLETS = ("sh", "cat", "echo", "sleep", "touch", "test", "[", "kill", "ls", "pwd", "tr")


def write_busybox_tar(path: Path) -> None:
    """A rootfs tar holding the host's static busybox and :data:`BUSYBOX_APPLETS`: an image
    with a shell in a second (for the tests that need no Python)."""
    busybox = shutil.which("busybox")
    assert busybox, "busybox-static is part of the podman component"
    with tarfile.open(path, "w") as tar:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in BUSYBOX_APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)


@pytest.fixture(scope="session")
def podman_engine(podman_env: dict[str, str]) -> ContainerEngine:
    """The engine the agents find (``podman`` on ``PATH``), configured by :func:`podman_env`."""
    found = detect_engine()
    assert found is not None
    return ContainerEngine(found.kind, found.executable, env=podman_env)


@pytest.fixture(scope="session")
def busybox_image(podman_engine: ContainerEngine, tmp_path_factory: pytest.TempPathFactory) -> str:
    """:data:`BUSYBOX_IMAGE`, imported into this session's Podman."""
    tar = tmp_path_factory.mktemp("busybox") / "busybox.tar"
    write_busybox_tar(tar)
    done = run_engine(podman_engine, podman_engine.argv("import", str(tar), BUSYBOX_IMAGE))
    assert done.returncode == 0, done.stderr
    return BUSYBOX_IMAGE
