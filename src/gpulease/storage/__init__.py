"""Checkpoint storage: atomic, verified checkpoint directories behind a small protocol.

``store_from_url("local://PATH")`` gives a :class:`LocalStore`, ``store_from_url("s3://BUCKET/
PREFIX")`` an :class:`S3Store`. A checkpoint is a set of data files plus ``manifest.json`` (sha256
and size of each file), written last; only checkpoints whose manifest and checksums verify are
*complete*. :class:`S3Store` needs boto3 (``gpulease[aws]``), which it imports only when one is
built: importing this package never imports boto3.
"""

from __future__ import annotations

from gpulease.storage.digest import CHECKSUM, entry_matches, file_digest
from gpulease.storage.inspect import CheckpointInfo, inspect_checkpoints, inspect_store
from gpulease.storage.local import LocalStore
from gpulease.storage.manifest import (
    MANIFEST,
    is_data_name,
    read_manifest,
    verify_dir,
    write_atomic,
    write_manifest,
)
from gpulease.storage.s3 import S3Store
from gpulease.storage.store import CheckpointStore, store_from_url
from gpulease.storage.writer import CheckpointWriter, HashingFile

__all__ = [
    "CHECKSUM",
    "MANIFEST",
    "CheckpointInfo",
    "CheckpointStore",
    "CheckpointWriter",
    "HashingFile",
    "LocalStore",
    "S3Store",
    "entry_matches",
    "file_digest",
    "inspect_checkpoints",
    "inspect_store",
    "is_data_name",
    "read_manifest",
    "store_from_url",
    "verify_dir",
    "write_atomic",
    "write_manifest",
]
