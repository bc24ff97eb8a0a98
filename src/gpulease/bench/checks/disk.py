"""``disk.seq_write``, ``disk.seq_read`` (MB/s) and ``disk.rand_read_iops`` (4 KiB random reads
a second) in a temporary directory under ``options.workdir``, removed after. Direct I/O
(``O_DIRECT``, page-aligned buffers) where the filesystem allows it; elsewhere (tmpfs, some
network filesystems) buffered I/O with the page cache dropped (``POSIX_FADV_DONTNEED``) before
each read and read-ahead off for the random reads — ``detail`` says which. The write is timed up
to its ``fsync``. No reference: disks differ by instance type, so peers and history judge them.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

BLOCK = 1 << 20  # sequential I/O in 1 MiB blocks
PAGE = 4096
SIZE_MIB = {True: 32, False: 256}
RANDOM_READS = {True: 2000, False: 20000}
MB = 1_000_000


def disk_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    workdir = Path(options.workdir)
    if not workdir.is_dir():
        why = f"the work directory {workdir} does not exist"
        return [Check.skipped(n, why) for n in ("disk.seq_write", "disk.seq_read",
                                                "disk.rand_read_iops")]  # fmt: skip
    scratch = Path(tempfile.mkdtemp(prefix=".gpulease-bench-", dir=workdir))
    try:
        return measure(scratch / "bench.bin", SIZE_MIB[options.quick] * BLOCK,
                       RANDOM_READS[options.quick], ctx.timer)  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _aligned(size: int) -> mmap.mmap:
    """A page-aligned buffer of ``size`` bytes (anonymous mmap), as O_DIRECT needs."""
    buffer = mmap.mmap(-1, size)
    buffer.write(os.urandom(min(size, BLOCK)) * max(1, size // BLOCK))
    return buffer


def _open(path: Path, flags: int, direct: bool) -> int:
    """``os.open``, with O_DIRECT when ``direct``."""
    return os.open(path, flags | (os.O_DIRECT if direct else 0), 0o600)


def _direct_allowed(path: Path) -> bool:
    """Whether the filesystem of ``path`` takes O_DIRECT (tmpfs and some others refuse it)."""
    if not hasattr(os, "O_DIRECT"):
        return False
    try:
        fd = _open(path, os.O_WRONLY | os.O_CREAT, direct=True)
    except OSError:
        return False
    os.close(fd)
    return True


def measure(path: Path, size: int, reads: int, timer: Callable[[], float], *,
            direct: bool | None = None) -> list[Check]:  # fmt: skip
    """Write ``size`` bytes to ``path``, read them back, then ``reads`` random 4 KiB reads;
    ``direct`` None: O_DIRECT where the filesystem allows it."""
    size = max(BLOCK, size - size % BLOCK)
    use_direct = _direct_allowed(path) if direct is None else direct
    how = "O_DIRECT" if use_direct else "buffered, page cache dropped (no O_DIRECT here)"
    buffer = _aligned(BLOCK)
    try:
        write_s = _write(path, size, buffer, use_direct, timer)
        read_s = _read(path, size, buffer, use_direct, timer)
        iops = _random_reads(path, size, reads, use_direct, timer)
    finally:
        buffer.close()
        path.unlink(missing_ok=True)
    mb, mib = size / MB, size // BLOCK
    extra = {"bytes": size, "direct": use_direct, "dir": str(path.parent.parent.resolve())}
    return [
        Check.measured("disk.seq_write", mb / write_s, detail=f"{mib} MiB in 1 MiB blocks, "
                       f"{how}, to fsync", extra=extra),
        Check.measured("disk.seq_read", mb / read_s, detail=f"{mib} MiB in 1 MiB blocks, {how}",
                       extra=extra),
        Check.measured("disk.rand_read_iops", iops, detail=f"{reads} random 4 KiB reads, {how}",
                       extra={**extra, "reads": reads}),
    ]  # fmt: skip


def _write(path: Path, size: int, buffer: mmap.mmap, direct: bool,
           timer: Callable[[], float]) -> float:  # fmt: skip
    start = timer()
    fd = _open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, direct)
    try:
        for _ in range(size // BLOCK):
            os.write(fd, buffer)
        os.fsync(fd)
    finally:
        os.close(fd)
    return timer() - start


def _drop_cache(fd: int) -> None:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _read(path: Path, size: int, buffer: mmap.mmap, direct: bool,
          timer: Callable[[], float]) -> float:  # fmt: skip
    fd = _open(path, os.O_RDONLY, direct)
    try:
        if not direct:
            _drop_cache(fd)
        start = timer()
        done = 0
        while done < size:
            got = os.readv(fd, [buffer])
            if got <= 0:
                break
            done += got
        return timer() - start
    finally:
        os.close(fd)


def _random_reads(path: Path, size: int, reads: int, direct: bool,
                  timer: Callable[[], float]) -> float:  # fmt: skip
    pages = size // PAGE
    rng = random.Random(0)
    offsets = [rng.randrange(pages) * PAGE for _ in range(reads)]
    page = mmap.mmap(-1, PAGE)
    fd = _open(path, os.O_RDONLY, direct)
    try:
        if not direct:
            _drop_cache(fd)
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        start = timer()
        for offset in offsets:
            os.preadv(fd, [page], offset)
        elapsed = timer() - start
    finally:
        os.close(fd)
        page.close()
    return reads / elapsed if elapsed > 0 else 0.0
