"""What goes into the test image's root file system, and writing it as a tar stream.

The test image (``tests/images.py``) is made without a network or a registry from what the test
machine already has: the files of the installed Debian packages that give ``/bin/sh``, ``bash``,
coreutils and Debian's ``python3`` (3.11), with their ``Depends`` closure (``dpkg-query``,
``dpkg -L``), plus the files of the Python distributions torch, numpy, scipy, scikit-learn and
gpulease's runtime requirements, with their closure from ``importlib.metadata`` requirements,
copied from the environment running the tests (cp311 manylinux wheels: fine for Debian's 3.11)
into ``/usr/local/lib/python3.11/dist-packages``, which Debian's ``python3`` reads. gpulease
itself is a layer of its own (:func:`write_gpulease_tar`), from the checkout under test.

What this module owns: those two lists (:func:`debian_closure`, :func:`python_closure`), the
inputs they are built from (their versions, for the cache key in ``tests/images.py``) and the
tar writers. Standard library plus ``packaging``; no Podman here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import io
import os
import re
import subprocess
import tarfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: Debian packages the image starts from (their Depends closure comes with them)
DEBIAN_ROOTS = ("bash", "dash", "coreutils", "grep", "sed", "mawk", "findutils", "procps",
                "python3-minimal", "libpython3-stdlib", "python3.11", "libstdc++6")  # fmt: skip
#: Python distributions the image starts from, besides gpulease's own requirements
PYTHON_ROOTS = ("torch", "numpy", "scipy", "scikit-learn", "joblib", "threadpoolctl")
DIST_PACKAGES = "usr/local/lib/python3.11/dist-packages"
#: what of a Debian package's files the image leaves out (documentation, translations)
_SKIPPED = re.compile(r"^/usr/share/(doc|man|info|locale|lintian|bug)/")
#: what of the Python distributions it leaves out: torch's C++ headers and test binaries, the
#: test suites of the others (a fifth of the files: creating a file is what costs most here)
_SKIPPED_DIST = re.compile(
    r"^torch/(include|test)/|^torch/bin/(?!torch_shm_manager$)|^(?!torch/)[^/]+/(.*/)?tests/"
)
_MERGED = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_DPKG_TIMEOUT_S = 60
_ETC = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:"
    "/usr/sbin/nologin\n",
    "etc/group": "root:x:0:\nnogroup:x:65534:\n",
    # `python` as in the images people train in (Debian's python-is-python3 does the same)
    "usr/local/bin/python": '#!/bin/sh\nexec /usr/bin/python3 "$@"\n',
    "usr/local/bin/torchrun": "#!/usr/bin/python3\nimport sys\n"
    "from torch.distributed.run import main\nsys.exit(main())\n",
}


def _dpkg_status() -> dict[str, tuple[str, str]]:
    """Every installed Debian package: its version and its ``Pre-Depends, Depends`` (one
    ``dpkg-query`` call)."""
    fmt = "${Package}\t${db:Status-Status}\t${Version}\t${Pre-Depends}, ${Depends}\n"
    listed = subprocess.run(["dpkg-query", "-W", f"-f={fmt}"], capture_output=True, text=True,
                            timeout=_DPKG_TIMEOUT_S, check=True).stdout  # fmt: skip
    status = {}
    for line in listed.splitlines():
        name, state, version, depends = line.split("\t")
        if state == "installed":
            status[name] = (version, depends)
    return status


def _depends(depends: str, installed: Mapping[str, object]) -> list[str]:
    """The installed package that satisfies each of the (Pre-)Depends ``depends`` names."""
    found = []
    for group in depends.split(","):
        choices = [re.sub(r"\(.*?\)", "", c).strip().split(":")[0] for c in group.split("|")]
        found += [c for c in choices if c in installed][:1]
    return found


def debian_closure(roots: Iterable[str] = DEBIAN_ROOTS) -> dict[str, str]:
    """The installed packages ``roots`` need (Depends closure), each with its version. A
    dependency only a virtual package satisfies (``awk``) is left to the packages named."""
    status = _dpkg_status()
    todo = list(roots)
    missing = [r for r in todo if r not in status]
    if missing:
        raise RuntimeError(f"the test image needs the Debian packages {' '.join(missing)}")
    seen: dict[str, str] = {}
    while todo:
        package = todo.pop()
        if package not in seen and package in status:
            version, depends = status[package]
            seen[package] = version
            todo += _depends(depends, status)
    return dict(sorted(seen.items()))


def _requirements(dist: md.Distribution) -> list[str]:
    names = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            names.append(req.name)
    return names


def python_closure(roots: Iterable[str]) -> list[md.Distribution]:
    """The installed distributions ``roots`` need (runtime requirements closure, no extras)."""
    seen: dict[str, md.Distribution] = {}
    todo = [(name, "the test image") for name in roots]
    while todo:
        raw, wanted_by = todo.pop()
        name = canonicalize_name(raw)
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise RuntimeError(f"{raw} (wanted by {wanted_by}) is not installed") from None
        seen[name] = dist
        todo += [(req, name) for req in _requirements(dist)]
    return [seen[n] for n in sorted(seen)]


def gpulease_requirements() -> list[str]:
    """gpulease's runtime requirements (no extras) as the environment running the tests has
    them installed."""
    return _requirements(md.distribution("gpulease"))


def source_digest(package_dir: Path) -> str:
    """A digest of a package's source files (paths and contents; no caches)."""
    h = hashlib.sha256()
    for path in sorted(_source_files(package_dir)):
        h.update(str(path.relative_to(package_dir)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _source_files(package_dir: Path) -> Iterator[Path]:
    for path in package_dir.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path


def _debian_paths(packages: Iterable[str]) -> set[Path]:
    """Every file and symlink of ``packages`` where it really is on this machine (``/bin/x`` of
    a merged-/usr system is ``/usr/bin/x``)."""
    paths: set[Path] = set()
    for package in packages:
        listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True,
                                timeout=_DPKG_TIMEOUT_S, check=False).stdout  # fmt: skip
        for line in listed.splitlines():
            if not line.startswith("/") or _SKIPPED.match(line) or line in ("/", "/."):
                continue
            path = Path(os.path.realpath(os.path.dirname(line))) / os.path.basename(line)
            if path.parent == Path("/") and path.name in _MERGED:
                continue  # the merged-/usr links themselves (write_base_tar adds them)
            if path.is_symlink() or path.is_file():
                paths.add(path)
    return paths


def _dist_paths(dists: Iterable[md.Distribution]) -> dict[Path, str]:
    """The files of ``dists`` inside their site-packages (with each module's compiled
    ``__pycache__`` file, so a container does not compile torch again), by name in the image."""
    out: dict[Path, str] = {}
    for dist in dists:
        site = Path(str(dist.locate_file(""))).resolve()
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if ".." in file.parts or not path.is_file():
                continue
            rel = path.relative_to(site)
            if _SKIPPED_DIST.match(rel.as_posix()):
                continue
            out[path] = f"{DIST_PACKAGES}/{rel}"
            if path.suffix == ".py":
                pyc = path.parent / "__pycache__" / f"{path.stem}.cpython-311.pyc"
                if pyc.is_file():
                    out[pyc] = f"{DIST_PACKAGES}/{rel.parent / '__pycache__' / pyc.name}"
    return out


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _open(stream: IO[bytes]) -> tarfile.TarFile:
    return tarfile.open(fileobj=stream, mode="w|", format=tarfile.GNU_FORMAT)


class _Tar:
    """A tar stream being written, that adds each file's parent directories once."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.dirs: set[str] = set()

    def directory(self, name: str, mode: int = 0o755) -> None:
        if name in self.dirs or name in ("", "."):
            return
        self.directory(os.path.dirname(name))
        info = tarfile.TarInfo(name)
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.tar.addfile(_owned_by_root(info))
        self.dirs.add(name)

    def file(self, path: Path, name: str) -> None:
        self.directory(os.path.dirname(name))
        info = self.tar.gettarinfo(str(path), name)
        if info.isreg():
            with open(path, "rb") as f:
                self.tar.addfile(_owned_by_root(info), f)
        else:
            self.tar.addfile(_owned_by_root(info))

    def text(self, name: str, text: str, mode: int = 0o644) -> None:
        self.directory(os.path.dirname(name))
        data = text.encode()
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        self.tar.addfile(_owned_by_root(info), io.BytesIO(data))


def write_base_tar(
    stream: IO[bytes], packages: Iterable[str], dists: Iterable[md.Distribution]
) -> None:
    """The base image's root file system: the Debian ``packages``' files, the Python ``dists``
    in dist-packages, ``python`` and ``torchrun`` shims and the few files a root file system
    needs."""
    with _open(stream) as tf:
        _write_base(_Tar(tf), packages, dists)


def _write_base(tar: _Tar, packages: Iterable[str], dists: Iterable[md.Distribution]) -> None:
    for name in _MERGED:  # a merged-/usr machine: /bin is a link to usr/bin (and so on)
        if os.path.islink(f"/{name}"):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{name}")
            tar.tar.addfile(_owned_by_root(info))
            tar.dirs.add(name)
    for name in ("proc", "sys", "dev", "run", "root", "home", "var/tmp", "etc"):
        tar.directory(name)
    tar.directory("tmp", 0o1777)
    for path in sorted(_debian_paths(packages)):
        tar.file(path, str(path).lstrip("/"))
    for path, name in sorted(_dist_paths(dists).items(), key=lambda item: item[1]):
        tar.file(path, name)
    for name, text in _ETC.items():
        tar.text(name, text, 0o755 if "/bin/" in name else 0o644)


def write_gpulease_tar(stream: IO[bytes], package_dir: Path) -> None:
    """gpulease's layer: the package from the checkout under test in dist-packages, and a
    ``dist-info`` naming its version and requirements (``importlib.metadata`` finds it)."""
    with _open(stream) as tf:
        _write_gpulease(_Tar(tf), package_dir)


def _write_gpulease(tar: _Tar, package_dir: Path) -> None:
    for path in sorted(_source_files(package_dir)):
        tar.file(path, f"{DIST_PACKAGES}/gpulease/{path.relative_to(package_dir)}")
    dist = md.distribution("gpulease")
    requires = "".join(f"Requires-Dist: {r}\n" for r in dist.requires or [])
    metadata = f"Metadata-Version: 2.1\nName: gpulease\nVersion: {dist.version}\n{requires}"
    info = f"{DIST_PACKAGES}/gpulease-{dist.version}.dist-info"
    tar.text(f"{info}/METADATA", metadata)
    tar.text(f"{info}/top_level.txt", "gpulease\n")
