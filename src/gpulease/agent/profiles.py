"""The profiles a job wrote on this node (``gpulease.train.profile``), for the server to fetch:
``work/profile/rank-<R>/summary.json`` and ``trace.json.gz``.

Only that folder is read, and only those two names: the rank and the file name are matched
against fixed patterns (no path from the request reaches the filesystem), a file or folder that
is a symlink, or resolves outside ``work/profile/``, is refused like a missing one, and a file
larger than :data:`MAX_PROFILE_BYTES` is refused (the agent answers from memory). Moves no
states.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

PROFILE_DIR = "profile"
PROFILE_FILES = ("summary.json", "trace.json.gz")
RANK_DIR = re.compile(r"rank-(0|[1-9][0-9]{0,5})")
MAX_PROFILE_BYTES = 512 << 20


class ProfileMissing(LookupError):
    """No such profile file on this node (or one the agent will not hand out)."""


class ProfileTooLarge(ValueError):
    pass


def list_profiles(work_dir: Path) -> dict[str, Any]:
    """``{ranks: [{rank, summary_bytes, trace_bytes, modified_at}]}``: the ranks whose
    ``summary.json`` is on this node (``trace_bytes`` null without a trace), by rank."""
    root = work_dir / PROFILE_DIR
    ranks = []
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        entries = []
    for entry in entries:
        match = RANK_DIR.fullmatch(entry.name)
        if match is None or not entry.is_dir(follow_symlinks=False):
            continue
        rank = int(match.group(1))
        summary = _regular(root, rank, "summary.json")
        if summary is None:
            continue
        trace = _regular(root, rank, "trace.json.gz")
        ranks.append({"rank": rank, "summary_bytes": summary.st_size,
                      "trace_bytes": None if trace is None else trace.st_size,
                      "modified_at": summary.st_mtime})  # fmt: skip
    return {"ranks": sorted(ranks, key=lambda r: r["rank"])}


def read_profile_file(work_dir: Path, rank: int, name: str) -> bytes:
    """The bytes of ``profile/rank-<rank>/<name>``; ``name`` one of :data:`PROFILE_FILES`."""
    if name not in PROFILE_FILES or rank < 0:
        raise ProfileMissing(f"{name}: not a profile file")
    root = work_dir / PROFILE_DIR
    info = _regular(root, rank, name)
    if info is None:
        raise ProfileMissing(f"no {name} of rank {rank} on this node")
    if info.st_size > MAX_PROFILE_BYTES:
        raise ProfileTooLarge(f"{name} of rank {rank} is {info.st_size} bytes, over the "
                              f"{MAX_PROFILE_BYTES} bytes the agent hands out")  # fmt: skip
    path = root / f"rank-{rank}" / name
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def _regular(root: Path, rank: int, name: str) -> os.stat_result | None:
    """The stat of a regular file ``root/rank-<rank>/name`` reached without symlinks and inside
    ``root``; None otherwise."""
    folder = root / f"rank-{rank}"
    path = folder / name
    try:
        for part in (root, folder, path):
            if stat.S_ISLNK(os.lstat(part).st_mode):
                return None
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    if not path.resolve().is_relative_to(root.resolve()):
        return None
    return info
