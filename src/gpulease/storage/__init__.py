"""Checkpoint storage: atomic, verified checkpoint directories behind a small protocol.

``store_from_url("local://PATH")`` gives a :class:`LocalStore`; ``s3://`` is not available yet.
A checkpoint is a directory of data files plus ``manifest.json`` (sha256 and size of each file),
written last; only checkpoints whose manifest and checksums verify are *complete*.
"""

from __future__ import annotations

from gpulease.storage.local import LocalStore
from gpulease.storage.manifest import (
    MANIFEST,
    file_digest,
    is_data_name,
    read_manifest,
    verify_dir,
    write_atomic,
    write_manifest,
)
from gpulease.storage.store import CheckpointStore, store_from_url

__all__ = [
    "MANIFEST",
    "CheckpointStore",
    "LocalStore",
    "file_digest",
    "is_data_name",
    "read_manifest",
    "store_from_url",
    "verify_dir",
    "write_atomic",
    "write_manifest",
]
