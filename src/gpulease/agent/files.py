"""Files a task brings to its node: the workdir (copied into the node's work dir, without
``.git``, ``.venv`` and ``__pycache__``) and file mounts (``{remote path: local path}``).

A remote path that is relative lands under the node's work dir; ``~`` is the job's home; an
absolute path is used as is. ``..`` is refused (by :class:`~gpulease.agent.api.TaskSubmission`).
Sources are local paths on the node: on the local provider the user's machine, elsewhere
whatever the server staged there.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

WORKDIR_EXCLUDES = (".git", ".venv", "__pycache__")


class FileSyncError(RuntimeError):
    """A workdir or mount source is missing or cannot be copied."""


def check_sources(workdir: str | None, file_mounts: Mapping[str, str]) -> None:
    """Fail fast (before the task is accepted) when a source does not exist."""
    sources = ([workdir] if workdir else []) + list(file_mounts.values())
    missing = [s for s in sources if not Path(s).expanduser().exists()]
    if missing:
        raise FileSyncError(f"no such file or directory on the node: {', '.join(missing)}")


def sync_workdir(source: str, work_dir: Path) -> None:
    """Copy ``source`` (a directory) over ``work_dir``; files there already are overwritten."""
    src = Path(source).expanduser()
    if not src.is_dir():
        raise FileSyncError(f"workdir {source} is not a directory")
    try:
        shutil.copytree(
            src,
            work_dir,
            symlinks=True,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(*WORKDIR_EXCLUDES),
        )
    except (OSError, shutil.Error) as exc:
        raise FileSyncError(f"workdir {source}: {exc}") from None


def resolve_remote(remote: str, work_dir: Path, home: str | None) -> Path:
    if remote.startswith("~"):
        base = home or os.path.expanduser("~")
        return Path(base) / remote.lstrip("~").lstrip("/")
    path = Path(remote)
    return path if path.is_absolute() else work_dir / path


def apply_file_mounts(mounts: Mapping[str, str], work_dir: Path, home: str | None) -> None:
    """Copy each local path to its remote path (directories recursively)."""
    for remote, local in mounts.items():
        src = Path(local).expanduser()
        dest = resolve_remote(remote, work_dir, home)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir():
                shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(src, dest)
        except OSError as exc:
            raise FileSyncError(f"file_mounts {remote}: {exc.strerror or exc}") from None
