"""Checkpoint file checksums: a sha256 tree over 16 MiB blocks, hashed on several cores.

One sha256 stream runs on one core (~1.7 GB/s on this project's CI machine), slower than a fast
disk takes a checkpoint. The manifest therefore records, per file, ``sha256_tree``: the sha256 of
the concatenated sha256 digests of the file's 16 MiB blocks (the last one shorter; an empty file
has no blocks). Blocks hash independently, so writing and verifying use every core. Manifests of
version 1 recorded the plain ``sha256`` of the whole file; :func:`entry_matches` still checks
those.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

CHECKSUM = "sha256-tree-16MiB"
BLOCK = 16 << 20
_SMALL = 1 << 20  # pieces below this are copied (their buffers may be reused by the writer)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def lower_thread_priority() -> None:
    """Nice the calling thread (Linux: per thread) so training threads win a contended core."""
    with contextlib.suppress(AttributeError, OSError):  # not Linux / not permitted: as is
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


BACKGROUND_NICE = 10
_POOL = ThreadPoolExecutor(
    max_workers=max(2, min(8, os.cpu_count() or 2)),
    thread_name_prefix="gpulease-hash",
    initializer=lower_thread_priority,
)


def _hash_pieces(pieces: list[bytes | memoryview]) -> bytes:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)  # releases the GIL for big buffers: blocks hash in parallel
    return h.digest()


class TreeHasher:
    """Incremental :data:`CHECKSUM` of a byte stream; full blocks hash on the shared pool.

    Big pieces are kept by reference until their block is hashed, so the caller must not change
    a buffer it passed to :meth:`update` before :meth:`hexdigest` returns.
    """

    def __init__(self) -> None:
        self._blocks: list[Future[bytes]] = []
        self._pieces: list[bytes | memoryview] = []
        self._filled = 0
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        """Add ``data`` to the stream."""
        view = memoryview(data).cast("B")
        self.size += len(view)
        while len(view):
            take = min(BLOCK - self._filled, len(view))
            piece = view[:take]
            self._pieces.append(bytes(piece) if take < _SMALL else piece)
            self._filled += take
            view = view[take:]
            if self._filled == BLOCK:
                self._submit()

    def _submit(self) -> None:
        self._blocks.append(_POOL.submit(_hash_pieces, self._pieces))
        self._pieces, self._filled = [], 0

    def hexdigest(self) -> str:
        """Wait for every block and return the tree digest (the hasher is finished after)."""
        if self._filled:
            self._submit()
        top = hashlib.sha256()
        for block in self._blocks:
            top.update(block.result())
        return top.hexdigest()

    def cancel(self) -> None:
        """Drop blocks not hashed yet (after a failed write)."""
        for block in self._blocks:
            block.cancel()


def file_digest(path: Path) -> tuple[str, int]:
    """The :data:`CHECKSUM` hex digest and size of a file (blocks hashed in parallel)."""
    hasher = TreeHasher()
    with open(path, "rb", buffering=0) as fh:
        while block := fh.read(BLOCK):
            hasher.update(block)
    return hasher.hexdigest(), hasher.size


def entry(digest: str, size: int) -> dict[str, Any]:
    """A manifest entry for one file."""
    return {"sha256_tree": digest, "size": size}


def entry_is_valid(value: object) -> bool:
    """True for a well-formed entry: a size and a tree digest (or a version-1 ``sha256``)."""
    if not isinstance(value, dict):
        return False
    size = value.get("size")
    digest = value.get("sha256_tree", value.get("sha256"))
    return (
        isinstance(size, int)
        and not isinstance(size, bool)
        and size >= 0
        and isinstance(digest, str)
        and bool(_HEX64.match(digest))
    )


def entry_matches(path: Path, value: dict[str, Any]) -> bool:
    """True when the file at ``path`` has the entry's size and checksum (False if unreadable)."""
    try:
        if not entry_is_valid(value) or path.stat().st_size != value["size"]:
            return False
        if "sha256_tree" in value:
            return file_digest(path)[0] == str(value["sha256_tree"])
        whole = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(BLOCK):
                whole.update(chunk)
        return whole.hexdigest() == str(value["sha256"])
    except OSError:
        return False
