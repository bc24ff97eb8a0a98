"""A wheel of exactly the gpulease this process runs, for the server to bring to its nodes.

Nodes run the server's own code, not whatever a package index has: an editable install with
uncommitted changes included. :func:`own_wheel` zips the files of the imported ``gpulease``
package (``__pycache__`` and compiled files left out) with a ``.dist-info`` made from the
installed distribution's metadata (``Requires-Dist``, extras, ``Requires-Python``, entry points),
a ``WHEEL`` file and a ``RECORD`` of sha256 digests. Its version is the distribution's plus a
local label naming the content, ``0.1.0+g<sha256 of files and metadata, 12 hex>``: the same
code gives the same version (and byte-identical wheel: fixed timestamps), any change another.

Built once per content into ``<cache>/gpulease-<version>-py3-none-any.whl`` (written to a temp
name, fsynced, renamed) and reused from there; the content is read once per process.
Moves no states.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import threading
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import gpulease
from gpulease.atomic import atomic_file
from gpulease.providers.base import ProviderError

DIST = "gpulease"
_EPOCH = (1980, 1, 1, 0, 0, 0)
_SKIP_SUFFIXES = (".pyc", ".pyo")
_BUILD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Wheel:
    path: Path
    version: str

    @property
    def filename(self) -> str:
        return self.path.name


def _package_files(package_dir: Path) -> list[tuple[str, bytes]]:
    """(archive path, content) of every file of the package, sorted."""
    files: list[tuple[str, bytes]] = []
    for path in sorted(package_dir.rglob("*")):
        relative = path.relative_to(package_dir)
        if not path.is_file() or "__pycache__" in relative.parts:
            continue
        if path.name.endswith(_SKIP_SUFFIXES) or path.name.startswith(".#"):
            continue
        files.append((f"{DIST}/{relative.as_posix()}", path.read_bytes()))
    return files


def _metadata_text(version: str) -> tuple[str, str]:
    """METADATA and entry_points.txt for ``version``, from the installed distribution."""
    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        raise ProviderError(
            "gpulease is not installed as a distribution (pip install -e . or pip install "
            "gpulease): the server cannot build the wheel it brings to its nodes"
        ) from None
    meta = dist.metadata
    lines = ["Metadata-Version: 2.1", f"Name: {DIST}", f"Version: {version}"]
    for key in ("Summary", "Requires-Python"):
        value = meta.json.get(key.lower().replace("-", "_"))
        if value:
            lines.append(f"{key}: {value}")
    lines += [f"Provides-Extra: {extra}" for extra in meta.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {req}" for req in meta.get_all("Requires-Dist") or []]
    return "\n".join(lines) + "\n", dist.read_text("entry_points.txt") or ""


def _digest(files: list[tuple[str, bytes]], *texts: str) -> str:
    digest = hashlib.sha256()
    for name, content in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(content).digest())
    for text in texts:
        digest.update(text.encode())
    return digest.hexdigest()


def _record_line(name: str, content: bytes) -> str:
    raw = hashlib.sha256(content).digest()
    return f"{name},sha256={base64.urlsafe_b64encode(raw).rstrip(b'=').decode()},{len(content)}"


def _local_version(base: str, digest: str) -> str:
    label = f"g{digest[:12]}"
    return f"{base}.{label}" if "+" in base else f"{base}+{label}"


@functools.cache
def _content() -> tuple[str, list[tuple[str, bytes]], str, str]:
    files = _package_files(Path(gpulease.__file__).resolve().parent)
    base_meta, entry_points = _metadata_text("{version}")
    version = _local_version(gpulease.__version__, _digest(files, base_meta, entry_points))
    return version, files, base_meta.replace("{version}", version), entry_points


def own_version() -> str:
    """The version :func:`own_wheel` gives this process's gpulease."""
    return _content()[0]


def own_wheel(cache_dir: Path) -> Wheel:
    """The wheel of the running gpulease, built into ``cache_dir`` unless already there (one
    build at a time in this process; another process's build is atomic too)."""
    version, files, meta, entry_points = _content()
    path = cache_dir / f"{DIST}-{version}-py3-none-any.whl"
    with _BUILD_LOCK:
        if not path.exists():
            _write(path, version, files, meta, entry_points)
    return Wheel(path, version)


def _write(
    path: Path, version: str, files: list[tuple[str, bytes]], meta: str, entry_points: str
) -> None:
    info = f"{DIST}-{version}.dist-info"
    wheel = "Wheel-Version: 1.0\nGenerator: gpulease\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    members = [*files, (f"{info}/METADATA", meta.encode()), (f"{info}/WHEEL", wheel.encode())]
    if entry_points:
        members.append((f"{info}/entry_points.txt", entry_points.encode()))
    record = "\n".join([*(_record_line(n, c) for n, c in members), f"{info}/RECORD,,"]) + "\n"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with atomic_file(path) as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in [*members, (f"{info}/RECORD", record.encode())]:
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, content)
