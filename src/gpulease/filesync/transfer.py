"""Moving a tree: pack the changed paths of a source as a tar stream, apply such a stream (and
its deletion list) to a destination, and copy a tree on one machine with the same placement
rules.

The stream (uncompressed tar, PAX format)::

    sync.json      first, optional: {"version": 1, "delete": [relative path, ...]}
    f/<rel>        one member per path sent: a regular file, a directory or a symbolic link

Applying: the deletions first (a directory goes with what it holds), then each member in
order. A file is written under a temp name beside its place and renamed over it, so nothing
ever sees half a file; a directory is created (replacing a file or link in its place); a link
is made under a temp name and renamed. Refused with :class:`UnsafePath` before anything of that
member is written: names that are absolute or have empty, ``.`` or ``..`` parts; a member whose
parent is a link or a file (writing through it could leave the destination); a link whose target
is absolute or leaves the destination; hard links, devices and fifos. There is no fsync per
file: the receiver's manifest is always computed from the files themselves, so a file torn by
a power loss reads as different and is sent again. Moves no states.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import stat
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from gpulease.filesync.tree import Changes, Entry, Found, Kind, dir_mode, file_mode, link_escapes

CONTROL = "sync.json"
PREFIX = "f/"
MAX_CONTROL = 64 << 20  # bytes of the deletion list: ~1M paths


class Readable(Protocol):
    """What :func:`apply_stream` reads from: a request body, a file."""

    def read(self, size: int = -1, /) -> bytes: ...


class UnsafePath(ValueError):
    """A member or deletion that would leave the destination, or is not a file, dir or link."""


class BadStream(ValueError):
    """The body is not a sync stream (not tar, an unexpected member, a bad deletion list)."""


def safe_rel(name: str) -> str:
    """``name`` when it is a clean relative POSIX path inside a destination, else UnsafePath."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\x00" in name
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise UnsafePath(f"{name!r} is not a relative path inside the destination")
    return name


# ---- packing ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Packed:
    sent: tuple[str, ...]
    deleted: tuple[str, ...]
    size: int  # bytes of the stream


def pack(
    found: Mapping[str, Found], local: Mapping[str, Entry], changes: Changes, out: IO[bytes]
) -> Packed:
    """Write the stream that applies ``changes`` (paths of ``local``, read through ``found``)."""
    start = out.tell()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        control = json.dumps({"version": 1, "delete": list(changes.delete)}).encode()
        info = tarfile.TarInfo(CONTROL)
        info.size = len(control)
        tar.addfile(info, io.BytesIO(control))
        for rel in changes.send:
            _add(tar, rel, local[rel], found[rel])
    return Packed(changes.send, changes.delete, out.tell() - start)


def _add(tar: tarfile.TarFile, rel: str, entry: Entry, found: Found) -> None:
    info = tarfile.TarInfo(PREFIX + rel)
    info.mtime = int(found.stat.st_mtime)
    if entry.kind is Kind.LINK:
        info.type, info.linkname = tarfile.SYMTYPE, entry.target
        tar.addfile(info)
        return
    info.mode = entry.mode
    if entry.kind is Kind.DIR:
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        return
    fd = os.open(found.path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        info.size = os.fstat(fd).st_size
        tar.addfile(info, fh)


# ---- applying ---------------------------------------------------------------------------------


@dataclass
class Applied:
    files: int = 0
    dirs: int = 0
    links: int = 0
    deleted: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {"files": self.files, "dirs": self.dirs, "links": self.links,
                "deleted": self.deleted, "bytes": self.bytes}  # fmt: skip


def apply_stream(stream: Readable, dest: Path) -> Applied:
    """Apply a sync stream read from ``stream`` (read once, front to back) under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    applied = Applied()
    try:  # stream mode ("r|") only ever calls read(); typeshed asks for a whole file object
        with tarfile.open(fileobj=cast(Any, stream), mode="r|") as tar:
            for index, member in enumerate(tar):
                if member.name == CONTROL and index == 0:
                    for rel in _deletions(tar, member):
                        applied.deleted += _delete(dest, rel)
                elif member.name.startswith(PREFIX):
                    _apply_member(tar, member, dest, applied)
                else:
                    raise BadStream(f"unexpected member {member.name!r} in the sync stream")
    except (tarfile.TarError, EOFError) as exc:
        raise BadStream(f"the body is not a complete tar stream: {exc}") from None
    return applied


def _deletions(tar: tarfile.TarFile, member: tarfile.TarInfo) -> list[str]:
    if not member.isreg() or member.size > MAX_CONTROL:
        raise BadStream(f"{CONTROL} must be a file of at most {MAX_CONTROL} bytes")
    fh = tar.extractfile(member)
    assert fh is not None  # a regular member always has a file
    try:
        data: Any = json.loads(fh.read())
    except ValueError:
        raise BadStream(f"{CONTROL} is not JSON") from None
    paths = data.get("delete", []) if isinstance(data, dict) else None
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise BadStream(f'{CONTROL}: "delete" must be a list of paths')
    return [safe_rel(p) for p in paths]


def _apply_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, dest: Path, applied: Applied
) -> None:
    name = member.name[len(PREFIX) :]
    rel = safe_rel(name.removesuffix("/") if member.isdir() else name)
    if member.issym():
        if link_escapes(rel, member.linkname):
            raise UnsafePath(f"{rel}: a link to {member.linkname!r} leads out of the destination")
        make_link(place(dest, rel), member.linkname)
        applied.links += 1
    elif member.isdir():
        make_dir(place(dest, rel), dir_mode(member.mode))
        applied.dirs += 1
    elif member.isreg():
        target = place(dest, rel)
        fh = tar.extractfile(member)
        assert fh is not None
        write_file(target, fh, file_mode(member.mode), member.mtime)
        applied.files += 1
        applied.bytes += member.size
    else:
        raise UnsafePath(f"{rel}: only files, directories and symbolic links can be sent")


# ---- placing one path -------------------------------------------------------------------------


def place(dest: Path, rel: str) -> Path:
    """The path of ``rel`` under ``dest``, its missing parents created; UnsafePath when a parent
    is a link or a file (a tree's parents come before their children, so a parent that is not a
    directory yet means the stream is not a tree)."""
    parts = rel.split("/")
    current = dest
    for part in parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o700)
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{rel}: {current.relative_to(dest)} is not a directory")
    return current / parts[-1]


def _temp_beside(target: Path) -> Path:
    return target.with_name(f".gpulease-tmp-{secrets.token_hex(6)}")


def _replace(tmp: Path, target: Path) -> None:
    """Rename ``tmp`` over ``target`` (a directory in its place is removed first)."""
    try:
        if stat.S_ISDIR(os.lstat(target).st_mode):
            shutil.rmtree(target)
    except FileNotFoundError:
        pass
    os.replace(tmp, target)


def remove(path: Path) -> bool:
    """Remove a file, link or directory tree (never following a link); False when absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()
    return True


def _delete(dest: Path, rel: str) -> int:
    current = dest
    for part in rel.split("/")[:-1]:  # never through a link: then the path is not in the tree
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return 0
        except FileNotFoundError:
            return 0
    return int(remove(current / rel.rsplit("/", maxsplit=1)[-1]))


def write_file(target: Path, src: IO[bytes], mode: int, mtime: float) -> None:
    """Write ``src`` to ``target`` atomically (temp beside it, then rename)."""
    tmp = _temp_beside(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
            os.fchmod(out.fileno(), mode)
        os.utime(tmp, (mtime, mtime))
        _replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def make_dir(target: Path, mode: int) -> None:
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        target.unlink()
        st = None
    if st is None:
        os.mkdir(target, 0o700)
    os.chmod(target, mode)


def make_link(target: Path, link_to: str) -> None:
    tmp = _temp_beside(target)
    os.symlink(link_to, tmp)
    try:
        _replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ---- copying on one machine -------------------------------------------------------------------


def copy_tree(found: Iterable[Found], dest: Path) -> int:
    """Copy the kept paths of a tree (from :func:`~gpulease.filesync.tree.walk`) over ``dest``:
    files there already are replaced, others left alone. The number of paths copied."""
    dest.mkdir(parents=True, exist_ok=True)
    count = 0
    for f in found:
        target = place(dest, f.rel)
        if f.kind is Kind.DIR:
            make_dir(target, dir_mode(f.stat.st_mode))
        elif f.kind is Kind.LINK:
            make_link(target, os.readlink(f.path))
        else:
            copy_file(f.path, target)
        count += 1
    return count


def copy_file(src: Path, target: Path, *, follow: bool = False) -> None:
    """Copy one regular file to ``target``, atomically; ``src`` itself may be a link only with
    ``follow`` (a path the user named)."""
    fd = os.open(src, os.O_RDONLY | (0 if follow else os.O_NOFOLLOW))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        write_file(target, fh, file_mode(st.st_mode), st.st_mtime)
