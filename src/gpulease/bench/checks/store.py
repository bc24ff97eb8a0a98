"""``store.read``: read throughput (MB/s) from the task's checkpoint store (``options.store``, a
:func:`gpulease.storage.store_from_url` URL). It writes a checkpoint of known size under a
hidden prefix of the store (``<store>/.gpulease-bench-<random>``: a name no reader of the store
lists, so a bench cut off midway never leaves a step a job could resume from), times its
download (checksums verified, as a job's restore does) and deletes it. Skipped without a store.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

SIZE_MB = {True: 32, False: 256}
FILE_MB = 16  # a checkpoint of several files, like a model's shards
MB = 1_000_000


def scratch_url(url: str) -> str:
    """A hidden place beside the store's checkpoints (``local://`` or a path or ``s3://``)."""
    return f"{url.rstrip('/')}/.gpulease-bench-{secrets.token_hex(4)}"


def _drop_cached(store: object, source: Path) -> None:
    """Evict what was just written from the page cache (a restore reads cold)."""
    from gpulease.storage import LocalStore

    if not hasattr(os, "posix_fadvise"):  # not Linux: the read may come from the cache
        return
    paths = list(source.iterdir())
    if isinstance(store, LocalStore):
        paths += list(store.path(0).iterdir())
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def store_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    if not options.store:
        return [Check.skipped("store.read", "no checkpoint store given (--store URL)")]
    from gpulease.storage import LocalStore, store_from_url

    url = scratch_url(options.store)
    store = store_from_url(url)
    size = SIZE_MB[options.quick] * MB
    work = Path(tempfile.mkdtemp(prefix=".gpulease-bench-store-", dir=options.workdir))
    try:
        source, dest = work / "src", work / "dest"
        source.mkdir()
        for i in range(max(1, size // (FILE_MB * MB))):
            (source / f"shard-{i}.bin").write_bytes(os.urandom(min(size, FILE_MB * MB)))
        written = sum(f.stat().st_size for f in source.iterdir())
        store.upload(0, source)
        _drop_cached(store, source)
        start = ctx.timer()
        store.download(0, dest)
        seconds = ctx.timer() - start
    finally:
        try:
            store.delete(0)
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(store, LocalStore):
                shutil.rmtree(store.root, ignore_errors=True)
    mb = written / MB
    return [Check.measured("store.read", mb / seconds if seconds > 0 else 0.0,
                           detail=f"download of a {mb:.0f} MB checkpoint written for the bench "
                           f"(checksums verified), {options.store}",
                           extra={"bytes": written, "store": options.store})]  # fmt: skip
