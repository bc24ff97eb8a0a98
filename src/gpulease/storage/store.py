"""The :class:`CheckpointStore` protocol and :func:`store_from_url`."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from gpulease.errors import UserInputError


@runtime_checkable
class CheckpointStore(Protocol):
    """Where complete checkpoints live, keyed by step."""

    def upload(self, step: int, src: Path) -> None:
        """Copy the data files of directory ``src`` as checkpoint ``step``; manifest last.

        When ``src`` has a manifest for ``step``, exactly its files are sent and each must match
        it; its extra fields are kept. A failed upload leaves no complete step (and, when it
        can, nothing at all); a killed one leaves an incomplete step.
        """

    def list_complete(self) -> list[int]:
        """Steps whose manifest and checksums verify, oldest first."""
        ...

    def list_incomplete(self) -> list[int]:
        """Steps with data but no manifest for that step (an upload or a delete cut off),
        oldest first. Readers never take them; a sync or prune deletes them."""
        ...

    def download(self, step: int, dest: Path) -> None:
        """Copy checkpoint ``step`` into ``dest``, verifying checksums; raises if it fails."""

    def delete(self, step: int) -> None:
        """Remove checkpoint ``step`` (no error when absent)."""

    def total_bytes(self) -> int:
        """Bytes the store holds, complete checkpoints or not (what its disk or bucket bills);
        0 when it has nothing (a missing root, an empty prefix)."""
        ...


def store_from_url(url: str) -> CheckpointStore:
    """Return the store for ``url``: ``local://PATH`` (or a plain path), ``s3://BUCKET[/PREFIX]``.

    Raises ``UserInputError`` naming the URL when it cannot name a store.
    """
    from gpulease.storage.local import LocalStore

    if url.startswith("local://"):
        path = url.removeprefix("local://")
        if not path:
            raise UserInputError(f"store URL {url!r} has no path (use local:///abs/path)")
        return LocalStore(Path(path))
    if url.startswith("s3://"):
        return _s3_store(url)
    if "://" in url:
        scheme = url.split("://", 1)[0]
        raise UserInputError(
            f"store URL {url!r}: unknown scheme {scheme!r} (use local://PATH or s3://BUCKET/PREFIX)"
        )
    return LocalStore(Path(url))


def _s3_store(url: str) -> CheckpointStore:
    """``s3://BUCKET/PREFIX`` → :class:`~gpulease.storage.s3.S3Store` (imports boto3)."""
    from gpulease.storage.s3 import S3Store

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise UserInputError(f"store URL {url!r} has no bucket (use s3://BUCKET/PREFIX)")
    try:
        return S3Store(bucket, prefix.strip("/"))
    except UserInputError as exc:
        raise UserInputError(f"store URL {url!r}: {exc}") from None
