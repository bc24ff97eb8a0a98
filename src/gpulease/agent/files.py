"""Files a task brings to its node: the workdir (copied into the node's work dir) and file
mounts (``{remote path: local path}``), with the rules of :mod:`gpulease.filesync`: the
default excludes (``.git``, ``.venv``, ``__pycache__``), ``.gitignore`` and ``.gpuleaseignore``.

A remote path that is relative lands under the node's work dir; ``~`` is the job's home; an
absolute path is used as is. ``..`` is refused (by :class:`~gpulease.agent.api.NodeTask`).
Sources are paths on the node: on the local and sim providers the user's own files; elsewhere the
bundles the server uploaded into the node's staging dir (``PUT /v1/files/<bundle>``), which were
filtered when they were sent and are copied as they are. Files already in the destination are
replaced; others are left alone. Moves no states.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


class FileSyncError(RuntimeError):
    """A workdir or mount source is missing or cannot be copied."""


def check_sources(workdir: str | None, file_mounts: Mapping[str, str]) -> None:
    """Fail fast (before the task is accepted) when a source does not exist."""
    sources = ([workdir] if workdir else []) + list(file_mounts.values())
    missing = [s for s in sources if not Path(s).expanduser().exists()]
    if missing:
        raise FileSyncError(f"no such file or directory on the node: {', '.join(missing)}")


def _staged(path: Path, staging: Path | None) -> bool:
    """Whether ``path`` is an uploaded bundle (already filtered: copied with no rules)."""
    return staging is not None and path.resolve().is_relative_to(staging.resolve())


def sync_workdir(source: str, work_dir: Path, staging: Path | None = None) -> None:
    """Copy the kept files of ``source`` (a directory) over ``work_dir``."""
    from gpulease import filesync

    src = Path(source).expanduser()
    if not src.is_dir():
        raise FileSyncError(f"workdir {source} is not a directory")
    try:
        found = filesync.source_tree("workdir", src, rules=not _staged(src, staging))
        filesync.copy_tree(found, work_dir)
    except (OSError, filesync.SourceError, filesync.UnsafePath) as exc:
        raise FileSyncError(f"workdir {source}: {exc}") from None


def resolve_remote(remote: str, work_dir: Path, home: str | None) -> Path:
    if remote.startswith("~"):
        base = home or os.path.expanduser("~")
        return Path(base) / remote.lstrip("~").lstrip("/")
    path = Path(remote)
    return path if path.is_absolute() else work_dir / path


def apply_file_mounts(
    mounts: Mapping[str, str], work_dir: Path, home: str | None, staging: Path | None = None
) -> None:
    """Copy each local path to its remote path (a directory's kept files, recursively)."""
    from gpulease import filesync

    for remote, local in mounts.items():
        src = Path(local).expanduser()
        dest = resolve_remote(remote, work_dir, home)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                found = filesync.source_tree(remote, src, rules=not _staged(src, staging))
                filesync.copy_tree(found, dest)
            else:
                filesync.copy_file(src, dest, follow=True)
        except OSError as exc:
            raise FileSyncError(f"file_mounts {remote}: {exc.strerror or exc}") from None
        except (filesync.SourceError, filesync.UnsafePath) as exc:
            raise FileSyncError(f"file_mounts {remote}: {exc}") from None
