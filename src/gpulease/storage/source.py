"""What a store's ``upload`` sends from a source directory, and the check that keeps it honest.

Owns the rule both stores follow (:meth:`LocalStore.upload <gpulease.storage.LocalStore.upload>`
and :meth:`S3Store.upload <gpulease.storage.S3Store.upload>`):

- a source holding a manifest **for the step being uploaded** (a checkpoint directory) sends
  exactly the files that manifest lists; each one's bytes, as they are sent, must have the
  listed size and checksum, and the manifest's extra fields (``format``, ``world_size``, …) are
  kept in the store's manifest;
- any other source (a plain directory of files, or one whose manifest names another step or does
  not parse) sends every data file, and the store's manifest is computed from the bytes sent.

A listed file that is missing, does not match its entry or changes while it is sent raises
``Permanent`` before the store writes any manifest: a store never holds, as complete, a step the
source did not have complete. The store then removes what it had sent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulease.errors import Permanent, UserInputError
from gpulease.storage.digest import entry_is_valid, entry_matches
from gpulease.storage.manifest import is_data_name, read_manifest

CORE_FIELDS = frozenset({"version", "step", "checksum", "files"})

FileIdentity = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class UploadSource:
    """The files an upload of ``step`` sends from ``directory``, and what they must match."""

    directory: Path
    step: int
    names: tuple[str, ...]
    fields: dict[str, Any]  # extra manifest fields the store's manifest keeps
    expected: dict[str, dict[str, Any]] | None  # the source manifest's entries, when it has one

    def path(self, name: str) -> Path:
        return self.directory / name

    def check(self, name: str, digest: str, size: int, sent: Path) -> None:
        """Raise ``Permanent`` unless the bytes sent of ``name`` (tree ``digest``, ``size``; a
        copy at ``sent``, used for a version-1 entry) match the source manifest's entry."""
        if self.expected is None:
            return
        want = self.expected[name]
        if "sha256_tree" in want:
            ok = want["sha256_tree"] == digest and want["size"] == size
        else:
            ok = want["size"] == size and entry_matches(sent, want)
        if not ok:
            raise Permanent(
                f"checkpoint step {self.step} in {self.directory}: {name} does not match its "
                "manifest (changed while it was uploaded?); the step was not uploaded"
            )

    def changed(self, name: str) -> Permanent:
        """The error for a file that changed while it was sent."""
        return Permanent(
            f"checkpoint step {self.step} in {self.directory}: {name} changed while it was "
            "uploaded; the step was not uploaded"
        )


def upload_source(src: Path, step: int) -> UploadSource:
    """What an upload of ``src`` as ``step`` sends (see the module docstring).

    Raises ``UserInputError`` when ``src`` is not a directory and ``Permanent`` when its manifest
    for ``step`` lists a bad entry or a file that is missing.
    """
    src = Path(src)
    if not src.is_dir():
        raise UserInputError(f"checkpoint source {src} is not a directory")
    manifest = read_manifest(src)
    if manifest is None or manifest["step"] != step:
        names = sorted(p.name for p in src.iterdir() if p.is_file() and is_data_name(p.name))
        return UploadSource(src, step, tuple(names), {}, None)
    files: dict[str, Any] = manifest["files"]
    for name, value in files.items():
        if not (isinstance(name, str) and is_data_name(name) and entry_is_valid(value)):
            raise Permanent(f"checkpoint step {step} in {src}: bad manifest entry {name!r}")
        if not (src / name).exists():
            raise Permanent(f"checkpoint step {step} in {src}: {name} is missing")
    fields = {k: v for k, v in manifest.items() if k not in CORE_FIELDS}
    return UploadSource(src, step, tuple(sorted(files)), fields, dict(files))


def file_identity(path: Path) -> FileIdentity:
    """What changes when a file is rewritten, in place or by rename: inode, size, m/ctime."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
