"""Helpers of the filesync tests: build a tree from a mapping, list a tree back."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def build(root: Path, files: Mapping[str, str | bytes]) -> Path:
    """Write ``files`` (relative path → content) under ``root``; a path ending in ``/`` is an
    empty directory, content ``"-> target"`` makes a symbolic link."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, content in files.items():
        path = root / rel
        if rel.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("-> "):
            os.symlink(content[3:], path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def listing(root: Path) -> dict[str, str]:
    """Every path under ``root``: files → content, links → ``-> target``, dirs → ``/``."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        for name in dirnames + filenames:
            path = base / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = "-> " + os.readlink(path)
            elif path.is_dir():
                out[rel] = "/"
            else:
                out[rel] = path.read_text(errors="replace")
    return out
