"""What is in a checkpoint directory or store: each step's status, size and format.

Backs ``gpulease checkpoints list|verify`` and is usable from Python
(``gpulease.storage.inspect_checkpoints("local:///ckpt")``). A step is *complete* when its
manifest and every checksum verify, *incomplete* when it has no (valid) manifest — a save that
was cut off, which restore skips — and *corrupt* when a manifest exists but a file is missing or
does not match its checksum.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from gpulease.storage.local import LocalStore
from gpulease.storage.manifest import MANIFEST, read_manifest, verify_dir
from gpulease.storage.store import CheckpointStore, store_from_url

Status = Literal["complete", "incomplete", "corrupt"]


@dataclass(frozen=True)
class CheckpointInfo:
    """One checkpoint step as found in a store."""

    step: int
    status: Status
    files: int | None = None
    bytes: int | None = None
    format: str | None = None
    world_size: int | None = None
    written_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def _local_info(store: LocalStore, step: int) -> CheckpointInfo:
    directory = store.path(step)
    manifest = read_manifest(directory)
    if manifest is None or manifest.get("step") != step:
        files = [p for p in directory.iterdir() if p.is_file()] if directory.is_dir() else []
        return CheckpointInfo(step, "incomplete", len(files), sum(p.stat().st_size for p in files))
    entries: dict[str, Any] = manifest["files"]
    written = dt.datetime.fromtimestamp((directory / MANIFEST).stat().st_mtime, dt.UTC)
    world = manifest.get("world_size")
    return CheckpointInfo(
        step=step,
        status="complete" if verify_dir(directory) else "corrupt",
        files=len(entries),
        bytes=sum(int(e.get("size", 0)) for e in entries.values() if isinstance(e, dict)),
        format=str(manifest.get("format", "replicated")),
        world_size=world if isinstance(world, int) else None,
        written_at=written.isoformat(timespec="seconds"),
    )


def inspect_store(store: CheckpointStore) -> list[CheckpointInfo]:
    """Every checkpoint step of ``store``, oldest first.

    A local store reports every step directory with its status; other stores (S3) list their
    complete and incomplete steps (an upload cut off), without details.
    """
    if isinstance(store, LocalStore):
        return [_local_info(store, step) for step in store.all_steps()]
    infos = [CheckpointInfo(step, "complete") for step in store.list_complete()]
    infos += [CheckpointInfo(step, "incomplete") for step in store.list_incomplete()]
    return sorted(infos, key=lambda info: info.step)


def inspect_checkpoints(location: str | Path) -> list[CheckpointInfo]:
    """Every checkpoint step at ``location`` (a directory, ``local://PATH`` or ``s3://…``)."""
    return inspect_store(store_from_url(str(location)))
