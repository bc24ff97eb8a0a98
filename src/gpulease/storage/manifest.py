"""Atomic file writes and the checkpoint manifest (DESIGN.md principle 8).

Every file is written under a temporary name, fsynced, then renamed into place, and the directory
is fsynced; ``manifest.json`` (``{"version": 1, "step": N, "files": {name: {sha256, size}}}``) is
written last, so a directory without a valid manifest is an incomplete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
_CHUNK = 1 << 20
_TEMP = re.compile(r"^\..+\.tmp-\d+$")


def is_data_name(name: str) -> bool:
    """True for a checkpoint data file name: flat, not the manifest, not a temp file of ours.

    Dot names are data (``torch.distributed.checkpoint`` writes ``.metadata``); only the temp
    names of :func:`write_atomic` (``.NAME.tmp-PID``) are not.
    """
    return (
        bool(name)
        and "/" not in name
        and name not in {MANIFEST, ".", ".."}
        and not (_TEMP.match(name))
    )


def fsync_dir(path: Path) -> None:
    """Fsync a directory so a rename inside it is durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp name, fsync and rename; fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def file_digest(path: Path) -> tuple[str, int]:
    """Return the sha256 hex digest and size of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def write_manifest(directory: Path, step: int, files: list[str]) -> dict[str, Any]:
    """Hash ``files`` (names inside ``directory``) and write the manifest last, atomically."""
    entries: dict[str, Any] = {}
    for name in sorted(files):
        digest, size = file_digest(directory / name)
        entries[name] = {"sha256": digest, "size": size}
    manifest: dict[str, Any] = {"version": 1, "step": step, "files": entries}
    write_atomic(directory / MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """Return the parsed manifest of ``directory``, or ``None`` when missing or malformed."""
    try:
        data = json.loads((directory / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    if not isinstance(data.get("step"), int):
        return None
    return data


def verify_dir(directory: Path) -> bool:
    """True when the manifest exists and every listed file has the recorded size and sha256."""
    manifest = read_manifest(directory)
    if manifest is None:
        return False
    for name, entry in manifest["files"].items():
        if not isinstance(entry, dict) or not is_data_name(name):
            return False
        path = directory / name
        try:
            if path.stat().st_size != entry.get("size"):
                return False
            digest, _ = file_digest(path)
        except OSError:
            return False
        if digest != entry.get("sha256"):
            return False
    return True
