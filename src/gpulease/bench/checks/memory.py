"""``memory.bandwidth``: device memory bandwidth, a large device-to-device copy (bytes read plus
bytes written per second) on every GPU at once, the slowest GPU's figure against the datasheet's
``memory_bandwidth_gbps``. On a CPU node, a host memcpy of a buffer well past the caches with
numpy, without a reference (peers and history judge it; a node whose memory is throttled or
shared shows here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpulease.bench.checks import gpus_unusable
from gpulease.bench.checks.timing import cuda_medians_s, median_s, slowest_gpu
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

HOST_MB = {True: 64, False: 256}
DEVICE_MB = {True: 1024, False: 4096}


def memory_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    if ctx.device == "cuda":
        return [device_bandwidth(options, ctx)]
    return [gpus_unusable("memory.bandwidth", ctx) or host_bandwidth(options, ctx)]


def host_bandwidth(options: BenchOptions, ctx: CheckContext) -> Check:
    import numpy as np

    size = HOST_MB[options.quick] * 1_000_000
    src = np.ones(size, dtype=np.uint8)
    dst = np.empty_like(src)
    repeats = 5 if options.quick else 9
    seconds = median_s(lambda: np.copyto(dst, src), ctx.timer, repeats=repeats)
    gbps = 2 * size / seconds / 1e9
    return Check.measured("memory.bandwidth", gbps,
                          detail=f"host memcpy of {size // 1_000_000} MB with numpy (read + "
                          f"write), median of {repeats}; no datasheet for host memory",
                          extra={"bytes": size, "where": "host"})  # fmt: skip


def _copy(torch: Any, size: int, device: int) -> Callable[[], object]:
    src = torch.empty(size, dtype=torch.uint8, device=f"cuda:{device}")
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def device_bandwidth(options: BenchOptions, ctx: CheckContext) -> Check:
    """A device-to-device copy on every GPU at once; the figure is the slowest GPU's."""
    import torch

    size = DEVICE_MB[options.quick] * 1_000_000
    free = min(torch.cuda.mem_get_info(d)[0] for d in range(ctx.gpu_count))
    size = min(size, free // 4)  # two buffers, with room to spare
    repeats = 5 if options.quick else 11
    try:
        copies = {d: _copy(torch, size, d) for d in range(ctx.gpu_count)}
        seconds = cuda_medians_s(torch, copies, repeats=repeats, inner=5)
    finally:
        torch.cuda.empty_cache()
    per_gpu = [2 * size / s / 1e9 for s in seconds]
    slowest, where = slowest_gpu(per_gpu)
    sheet = ctx.spec.memory_bandwidth_gbps if ctx.spec is not None else None
    return Check.measured("memory.bandwidth", per_gpu[slowest], reference=sheet or None,
                          reference_source="datasheet",
                          detail=f"device copy of {size // 1_000_000} MB on {where} (read + "
                          f"write), CUDA events, median of {repeats}",
                          extra={"bytes": size, "where": "device",
                                 "per_gpu": [round(g, 1) for g in per_gpu]})  # fmt: skip
