"""Atomic file writes: a reader sees the old file or the new one, never a part (DESIGN.md 8).

Every writer here does the same steps: a temp file in the target's own directory (so the
rename stays on one filesystem), the bytes, flush, ``fsync``, ``os.replace`` over the target
(or, with ``exclusive=True``, a hard link that fails when the target exists), then ``fsync`` of
the directory so the rename itself survives a crash. On any failure — an ``OSError`` such as a
full disk, an exception raised by the code producing the content, ``KeyboardInterrupt`` — the
temp file is removed and the old file is left as it was.

``mode`` is the file's permission bits from the moment the temp file is created (``os.open``
with that mode, then ``fchmod`` to exactly it): a secret written with ``mode=0o600`` is never
readable by others, not even for an instant. Without ``mode`` the file gets what ``open()``
would give (``0o666`` less the umask). ``durable=False`` (a heartbeat rewritten every few
seconds) skips both fsyncs: still never torn for a reader, but a power cut may lose the latest
content.

- :func:`write_atomic` — bytes or text from memory;
- :func:`write_json_atomic` — a JSON document (one trailing newline);
- :func:`atomic_file` — a context manager for streamed writes (``with atomic_file(p) as fh:``);
  the file is put in place on a clean exit, dropped after an exception;
- :class:`AtomicFile` — the same as an object, for a writer that holds the file across calls;
- :func:`fsync_path`, :func:`is_temp_name` — the pieces, for writers with their own structure.

A base module: imports nothing of gpulease. Moves no states.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal, overload

_TEMP = re.compile(r"\..*\.tmp-[0-9]+-[0-9a-f]{8}", re.DOTALL)  # fullmatch
_NAME_KEPT = 200  # bytes of the target's name in the temp's: it stays under NAME_MAX (255)


def temp_path(path: Path) -> Path:
    """A fresh temp name beside ``path``: ``.NAME.tmp-PID-RANDOM`` (see :func:`is_temp_name`)."""
    name = os.fsdecode(os.fsencode(path.name)[:_NAME_KEPT])
    return path.with_name(f".{name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def is_temp_name(name: str) -> bool:
    """True for the name of a temp file of this module (left behind only by a killed writer)."""
    return _TEMP.fullmatch(name) is not None


def fsync_path(path: str | os.PathLike[str]) -> None:
    """Fsync an existing file or directory (a directory: so a rename inside it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicFile:
    """A new content for ``path``, written to :attr:`file` (binary) under a temp name.

    :meth:`commit` flushes, fsyncs and renames it into place; :meth:`abort` removes it. A
    failure inside :meth:`commit` aborts before it raises, so the old file is never touched.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        mode: int | None = None,
        exclusive: bool = False,
        durable: bool = True,
    ) -> None:
        self.path = Path(path)
        self.temp = temp_path(self.path)
        self._exclusive = exclusive
        self._durable = durable
        self._open = True
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = os.open(self.temp, flags, 0o666 if mode is None else mode)
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # exactly ``mode``: the umask may have narrowed it
            self.file: IO[bytes] = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            self.temp.unlink(missing_ok=True)
            raise

    def commit(self, *, sync_dir: bool = True) -> None:
        """Put the content in place. ``sync_dir=False`` leaves the directory's fsync to the
        caller (a writer of many files in one directory syncs it once, after the last)."""
        if not self._open:
            raise ValueError(f"{self.path}: the atomic write is already finished")
        try:
            self.file.flush()
            if self._durable:
                os.fsync(self.file.fileno())
            self.file.close()
            if self._exclusive:
                os.link(self.temp, self.path)  # FileExistsError when it exists: never replaced
                self.temp.unlink()
            else:
                os.replace(self.temp, self.path)
        except BaseException:
            self.abort()
            raise
        self._open = False
        if sync_dir and self._durable:
            fsync_path(self.path.parent)

    def abort(self) -> None:
        """Drop the temp file; the old file (if any) stays as it was."""
        self._open = False
        with contextlib.suppress(OSError):  # a full disk fails the close's flush too
            self.file.close()
        self.temp.unlink(missing_ok=True)


@overload
def atomic_file(
    path: str | os.PathLike[str],
    *,
    mode: int | None = None,
    exclusive: bool = False,
    durable: bool = True,
    text: Literal[False] = False,
) -> contextlib.AbstractContextManager[IO[bytes]]: ...


@overload
def atomic_file(
    path: str | os.PathLike[str],
    *,
    mode: int | None = None,
    exclusive: bool = False,
    durable: bool = True,
    text: Literal[True],
    encoding: str = "utf-8",
    newline: str | None = None,
) -> contextlib.AbstractContextManager[IO[str]]: ...


@contextmanager
def atomic_file(
    path: str | os.PathLike[str],
    *,
    mode: int | None = None,
    exclusive: bool = False,
    durable: bool = True,
    text: bool = False,
    encoding: str = "utf-8",
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """Stream the new content of ``path`` into the file it yields (binary, or ``text=True``);
    it is put in place when the block ends cleanly, dropped when the block raises."""
    out = AtomicFile(path, mode=mode, exclusive=exclusive, durable=durable)
    try:
        if text:
            wrapper = io.TextIOWrapper(out.file, encoding=encoding, newline=newline)
            yield wrapper
            wrapper.flush()
            wrapper.detach()  # the binary file stays open for commit()
        else:
            yield out.file
    except BaseException:
        out.abort()
        raise
    out.commit()


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | str,
    *,
    mode: int | None = None,
    exclusive: bool = False,
    durable: bool = True,
) -> None:
    """Replace ``path``'s content with ``data`` (text is written as UTF-8). ``exclusive=True``
    creates the file only if there is none (``FileExistsError`` otherwise, nothing written)."""
    with atomic_file(path, mode=mode, exclusive=exclusive, durable=durable) as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def write_json_atomic(
    path: str | os.PathLike[str], data: Any, *, indent: int | None = None, mode: int | None = None
) -> None:
    """Replace ``path``'s content with ``data`` as JSON and a newline."""
    write_atomic(path, json.dumps(data, indent=indent) + "\n", mode=mode)
