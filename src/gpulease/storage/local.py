""":class:`LocalStore`: checkpoints as ``ROOT/step-<N>/`` directories on a local filesystem.

A step directory moves from absent to *incomplete* (data files, renamed into place one by one) to
*complete* (its manifest, written last); :meth:`LocalStore.delete` takes the manifest away first.
An upload that fails removes what it wrote; one whose process is killed leaves an incomplete
step, which no reader takes and which :meth:`LocalStore.list_incomplete` names for clean-up.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulease.errors import Permanent, UserInputError
from gpulease.storage.digest import BLOCK
from gpulease.storage.manifest import MANIFEST, is_data_name, read_manifest, verify_dir
from gpulease.storage.source import UploadSource, upload_source
from gpulease.storage.writer import CheckpointWriter

_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir_name(step: int) -> str:
    """The directory name of checkpoint ``step``."""
    return f"step-{step}"


class LocalStore:
    """A :class:`~gpulease.storage.CheckpointStore` rooted at a local directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, step: int) -> Path:
        """The directory of checkpoint ``step``."""
        return self.root / step_dir_name(step)

    def upload(self, step: int, src: Path) -> None:
        """Copy ``src`` as checkpoint ``step``: each file atomically, hashed as it is copied,
        the manifest last (what is sent and checked: :mod:`gpulease.storage.source`).

        An old copy of ``step`` is deleted first. When the copy fails (a file that does not match
        ``src``'s manifest, an I/O error) what was written is removed and the error raised.
        """
        source = upload_source(Path(src), step)
        dest = self.path(step)
        if dest.resolve() == source.directory.resolve():
            raise UserInputError(
                f"checkpoint step {step}: {src} is already that step of {self.root}"
            )
        self.delete(step)
        dest.mkdir(parents=True)
        out = CheckpointWriter(dest, step, source.fields)
        try:
            for name in source.names:
                _copy_checked(source, name, out)
            out.finish()
        except BaseException:
            out.abort()
            self.delete(step)
            raise

    def writer(self, step: int, fields: Mapping[str, Any] | None = None) -> CheckpointWriter:
        """Start checkpoint ``step`` afresh (any old directory of that step is removed).

        Files opened on the writer are hashed as they are written; the manifest (with
        ``fields`` added) is written last when the writer closes cleanly.
        """
        dest = self.path(step)
        if dest.exists():
            self.delete(step)
        dest.mkdir(parents=True)
        return CheckpointWriter(dest, step, fields)

    def write(self, step: int, files: dict[str, bytes]) -> None:
        """Write checkpoint ``step`` from in-memory ``files``: each atomically, manifest last."""
        with self.writer(step) as out:
            for name, data in files.items():
                out.write_bytes(name, data)

    def all_steps(self) -> list[int]:
        """Every step directory present, complete or not, oldest first."""
        if not self.root.is_dir():
            return []
        steps = []
        for item in self.root.iterdir():
            match = _STEP_DIR.match(item.name)
            if match and item.is_dir():
                steps.append(int(match.group(1)))
        return sorted(steps)

    def has_manifest(self, step: int) -> bool:
        """True when checkpoint ``step`` has a readable manifest for that step (no hashing)."""
        manifest = read_manifest(self.path(step))
        return manifest is not None and manifest["step"] == step

    def is_complete(self, step: int) -> bool:
        """True when checkpoint ``step`` has a manifest for that step and its checksums verify."""
        directory = self.path(step)
        manifest = read_manifest(directory)
        return manifest is not None and manifest["step"] == step and verify_dir(directory)

    def list_complete(self) -> list[int]:
        """Steps whose manifest and checksums verify, oldest first."""
        return [s for s in self.all_steps() if self.is_complete(s)]

    def list_incomplete(self) -> list[int]:
        """Step directories without a manifest for their step (a write or an upload cut off,
        or a delete), oldest first; no hashing. Never read; safe to delete."""
        return [s for s in self.all_steps() if not self.has_manifest(s)]

    def download(self, step: int, dest: Path) -> None:
        """Copy checkpoint ``step`` (manifest included) into ``dest`` and verify the copy."""
        src = self.path(step)
        if not self.is_complete(step):
            raise Permanent(f"checkpoint step {step} in {self.root} is missing or corrupt")
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        for item in src.iterdir():
            if item.is_file() and (is_data_name(item.name) or item.name == MANIFEST):
                shutil.copyfile(item, dest / item.name)
        if not verify_dir(dest):
            raise Permanent(f"checkpoint step {step} changed while it was downloaded")

    def total_bytes(self) -> int:
        """The size of every regular file under the root (complete or not, temp files too);
        0 when the root is missing. Files removed while it walks are skipped."""
        total = 0
        for directory, _dirs, names in os.walk(self.root):
            for name in names:
                try:
                    info = os.lstat(os.path.join(directory, name))
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
        return total

    def delete(self, step: int) -> None:
        """Remove checkpoint ``step``: the manifest first, so a half-deleted one is incomplete."""
        directory = self.path(step)
        if not directory.exists():
            return
        (directory / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(directory, ignore_errors=True)


def _copy_checked(source: UploadSource, name: str, out: CheckpointWriter) -> None:
    """Copy ``name`` into ``out`` (temp name, hashed as written, fsync, rename); then check the
    bytes written against ``source``'s manifest."""
    with out.open(name) as handle, open(source.path(name), "rb", buffering=0) as fh:
        while chunk := fh.read(BLOCK):
            handle.write(chunk)
    source.check(name, str(handle.digest), handle.size, handle.path)  # digest: set by close
