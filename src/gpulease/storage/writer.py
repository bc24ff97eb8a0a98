"""Streaming checkpoint writes: files hashed as they are written, the manifest from those digests.

``LocalStore.writer(step)`` gives a :class:`CheckpointWriter`; ``writer.open(name)`` gives a
write-only file (:class:`HashingFile`) that a serializer such as ``torch.save`` writes into. The
bytes go to a temp name, are fsynced and renamed into place on close; the checksum is computed as
the bytes pass (on a helper thread, so hashing overlaps the writing and the serializer)
instead of by reading the file back. When the writer closes without an error the manifest is
written last from the recorded digests; after an error there is no manifest, so the step is
incomplete and restore skips it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from gpulease.atomic import AtomicFile
from gpulease.storage.digest import TreeHasher, entry
from gpulease.storage.manifest import MANIFEST, fsync_dir, is_data_name, new_manifest, write_atomic

Transform = Callable[[bytes | memoryview], bytes]


class _AllOrNothing:
    """A context manager that commits on a clean exit and aborts after an exception."""

    def _commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self._commit()
        else:
            self.abort()


class HashingFile(_AllOrNothing):
    """A write-only binary file that records sha256 and size; atomic on :meth:`close`.

    ``transform`` (e.g. a streaming cipher's ``update``) is applied to every chunk before it is
    hashed and written; ``trailer`` (e.g. the cipher's ``finalize``) supplies the final bytes.
    Big chunks are hashed on a helper thread while the writer goes on, so the caller must not
    change a buffer it passed to :meth:`write` before :meth:`close` (``torch.save`` of a snapshot
    does not: its tensors stay untouched until the save is over).
    """

    def __init__(
        self,
        path: Path,
        *,
        header: bytes = b"",
        transform: Transform | None = None,
        trailer: Callable[[], bytes] | None = None,
    ) -> None:
        self.path = path
        self._out = AtomicFile(path)  # committed in close(), dropped in abort()
        self._fh: IO[bytes] = self._out.file
        self._hash = TreeHasher()
        self._transform = transform
        self._trailer = trailer
        self.size = 0
        self.digest: str | None = None
        if header:
            self._emit(header)

    def _emit(self, data: bytes | memoryview) -> None:
        self._hash.update(data)  # full blocks hash on the pool while the writing goes on
        self._fh.write(data)
        self.size += len(data)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` (transformed when a transform is set); return its length."""
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self._emit(self._transform(view) if self._transform else view)
        return len(view)

    def flush(self) -> None:
        """Flush Python's buffer (durability comes with :meth:`close`)."""
        self._fh.flush()

    def close(self) -> None:
        """Finish: trailer, fsync, rename into place; sets :attr:`digest`. The directory is
        fsynced once for all its files, by :meth:`CheckpointWriter.finish`."""
        if self.digest is not None:
            return
        if self._trailer is not None:
            self._emit(self._trailer())
        self._out.commit(sync_dir=False)
        self.digest = self._hash.hexdigest()

    def abort(self) -> None:
        """Drop the temp file (after a failed write)."""
        self._hash.cancel()
        self._out.abort()

    def _commit(self) -> None:
        self.close()


class CheckpointWriter(_AllOrNothing):
    """Write the files of one checkpoint directory; the manifest goes last on a clean exit."""

    def __init__(self, directory: Path, step: int, fields: Mapping[str, Any] | None = None) -> None:
        self.directory = directory
        self.step = step
        self.fields = dict(fields or {})
        self._entries: dict[str, dict[str, Any]] = {}
        self._open: list[HashingFile] = []

    def open(
        self,
        name: str,
        *,
        header: bytes = b"",
        transform: Transform | None = None,
        trailer: Callable[[], bytes] | None = None,
    ) -> HashingFile:
        """A new data file ``name`` in the checkpoint (use it as a context manager)."""
        if not is_data_name(name):
            raise ValueError(f"bad checkpoint file name {name!r}")
        if name in self._entries or any(f.path.name == name for f in self._open):
            raise ValueError(f"checkpoint file {name!r} written twice")
        handle = HashingFile(
            self.directory / name, header=header, transform=transform, trailer=trailer
        )
        self._open.append(handle)
        return handle

    def write_bytes(self, name: str, data: bytes) -> None:
        """Write a whole file from memory."""
        with self.open(name) as handle:
            handle.write(data)

    def add_existing(self, name: str, digest: str, size: int) -> None:
        """Record a file someone else wrote into the directory (already durable)."""
        self._entries[name] = entry(digest, size)

    def _collect(self) -> None:
        for handle in self._open:
            if handle.digest is None:
                raise ValueError(f"checkpoint file {handle.path.name!r} was not closed")
            self._entries[handle.path.name] = entry(handle.digest, handle.size)
        self._open.clear()

    def finish(self) -> dict[str, Any]:
        """Fsync the directory and write the manifest (last); return it."""
        self._collect()
        fsync_dir(self.directory)
        manifest = new_manifest(self.step, self._entries, self.fields)
        write_atomic(self.directory / MANIFEST, json.dumps(manifest, indent=1).encode())
        fsync_dir(self.directory.parent)
        return manifest

    def abort(self) -> None:
        """Drop the temp files of any file still open (the step stays incomplete)."""
        for handle in self._open:
            if handle.digest is None:
                handle.abort()
        self._open.clear()

    def _commit(self) -> None:
        self.finish()
