"""Giving the telemetry's freed memory back to the operating system (glibc's allocator; a
no-op elsewhere).

Why: the relayed text is ~26 MB at 1,000 nodes of 8 GPUs, and a scrape builds it into one buffer
(and the endpoint into another). glibc raises its mmap threshold to the size of the first such
buffer freed, so the next ones come from the heap, and freed heap pages stay in the process:
the server's RSS kept each scrape's buffers (benchmarks/README.md, "metrics"). Owns
:func:`map_large_buffers` (a fixed threshold: a buffer of 1 MiB or more is mapped on its own and
unmapped when freed; glibc then no longer moves the threshold) and :func:`trim`
(``malloc_trim``: free pages inside the heaps go back, called after each relay pass). Moves no
states.
"""

from __future__ import annotations

import ctypes
import platform
from functools import cache

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
LARGE_BUFFER = 1 << 20


@cache
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@cache
def map_large_buffers(threshold: int = LARGE_BUFFER) -> bool:
    """Buffers of ``threshold`` bytes or more mapped on their own (once per process); whether
    the allocator took it."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, ctypes.c_int(threshold)))


def trim() -> bool:
    """Free pages of the allocator's heaps back to the system; whether any went back."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(ctypes.c_size_t(0)))
