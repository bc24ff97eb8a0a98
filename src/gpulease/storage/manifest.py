"""Atomic file writes and the checkpoint manifest (DESIGN.md principle 8).

Every file is written under a temporary name, fsynced, then renamed into place, and the directory
is fsynced (:mod:`gpulease.atomic`, whose ``write_atomic`` and ``fsync_path`` this module
re-exports); ``manifest.json`` (``{"version": 2, "step": N, "checksum": "sha256-tree-16MiB", ...,
"files": {name: {"sha256_tree", "size"}}}``, see :mod:`gpulease.storage.digest`) is written last,
so a directory without a valid manifest is an incomplete checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulease.atomic import fsync_path, is_temp_name, write_atomic
from gpulease.storage.digest import CHECKSUM, entry, entry_matches, file_digest

__all__ = ["MANIFEST", "MANIFEST_VERSION", "fsync_dir", "fsync_path", "is_data_name",
           "new_manifest", "read_manifest", "verify_dir", "write_atomic",
           "write_manifest"]  # fmt: skip

MANIFEST = "manifest.json"
MANIFEST_VERSION = 2


def is_data_name(name: str) -> bool:
    """True for a checkpoint data file name: flat, not the manifest, not a temp file of ours.

    Dot names are data (``torch.distributed.checkpoint`` writes ``.metadata``); only the temp
    names of :mod:`gpulease.atomic` (``.NAME.tmp-PID-RANDOM``) are not.
    """
    return (
        bool(name)
        and "/" not in name
        and name not in {MANIFEST, ".", ".."}
        and not is_temp_name(name)
    )


fsync_dir = fsync_path  # the name the callers that sync directories use


def new_manifest(
    step: int, entries: dict[str, dict[str, Any]], fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The manifest of checkpoint ``step`` with ``entries`` ({name: :func:`digest.entry`})."""
    return {
        "version": MANIFEST_VERSION,
        "step": step,
        "checksum": CHECKSUM,
        **(fields or {}),
        "files": dict(sorted(entries.items())),
    }


def write_manifest(
    directory: Path, step: int, files: list[str], fields: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Hash ``files`` (names inside ``directory``) and write the manifest last, atomically."""
    entries = {name: entry(*file_digest(directory / name)) for name in files}
    manifest = new_manifest(step, entries, fields)
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
    """True when the manifest exists and every listed file has the recorded size and checksum."""
    manifest = read_manifest(directory)
    if manifest is None:
        return False
    return all(
        is_data_name(name) and isinstance(value, dict) and entry_matches(directory / name, value)
        for name, value in manifest["files"].items()
    )
