"""The node's staging dir for files the server uploads: ``<node dir>/files/<bundle>/``, one
bundle per workdir or file mount (``GET`` / ``PUT /v1/files/<bundle>``).

Owns reading a bundle's manifest — always computed from the files themselves (hashes cached by
stat), so an interrupted upload or a file changed on the node is simply seen as different — and
applying a sync stream (:mod:`gpulease.filesync.transfer`) into it, one upload at a time. A task's
``workdir`` / ``file_mounts`` then name these paths, and the task's own copy step copies them as
they are. Moves no states.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulease.filesync import HashCache, Readable

BUNDLE_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
DEFAULT_MAX_UPLOAD_MB = 20_000  # a bound against runaways; the server's limit is the real one


class Staging:
    def __init__(self, root: Path, *, max_upload_bytes: int) -> None:
        self.root = root
        self.max_upload_bytes = max_upload_bytes
        self._lock = threading.Lock()
        self._cache: HashCache | None = None

    def path(self, bundle: str) -> Path:
        return self.root / bundle

    def _hashes(self) -> HashCache:
        from gpulease.filesync import HashCache

        if self._cache is None:
            self._cache = HashCache()
        return self._cache

    def manifest(self, bundle: str) -> dict[str, Any]:
        """``{bundle, path, manifest, max_upload_bytes}``; an empty manifest for a bundle never
        uploaded (``path`` is where it will be)."""
        from gpulease import filesync

        path = self.path(bundle)
        with self._lock:
            found = filesync.walk(path, rules=False) if path.is_dir() else []
            tree = filesync.manifest(found, self._hashes())
        return {
            "bundle": bundle,
            "path": str(path),
            "manifest": filesync.manifest_to_json(tree),
            "max_upload_bytes": self.max_upload_bytes,
        }

    def apply(self, bundle: str, stream: Readable) -> dict[str, Any]:
        """Apply a sync stream to the bundle: ``{bundle, path, files, dirs, links, deleted,
        bytes}``. Raises :class:`~gpulease.filesync.UnsafePath`,
        :class:`~gpulease.filesync.BadStream` or :class:`OSError`."""
        from gpulease import filesync

        path = self.path(bundle)
        with self._lock:
            self.root.mkdir(mode=0o700, exist_ok=True)
            applied = filesync.apply_stream(stream, path)
        return {"bundle": bundle, "path": str(path), **applied.to_json()}
