"""``h2d.pinned`` / ``d2h.pinned``: host↔device copies from and to pinned host memory, timed with
CUDA events. No datasheet reference: what a link gives depends on the host's PCIe (or C2C) more
than on the part, so peers and history judge it; the link NVML reports is in ``extra``. On a CPU
node both skip.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.bench.checks import gpus_unusable
from gpulease.bench.checks.device import nvml
from gpulease.bench.checks.timing import cuda_median_s
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

SIZE_MB = {True: 256, False: 1024}


def transfer_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    if ctx.device != "cuda":
        why = ctx.no_cuda or "no GPU"
        return [
            gpus_unusable(n, ctx) or Check.skipped(n, why) for n in ("h2d.pinned", "d2h.pinned")
        ]
    import torch

    size = SIZE_MB[options.quick] * 1_000_000
    repeats = 5 if options.quick else 11
    link = pcie_link()
    try:
        seconds = _pinned_s(torch, size, repeats)
    finally:
        torch.cuda.empty_cache()
    detail = (f"{size // 1_000_000} MB pinned, cuda:0, CUDA events, median of {repeats}; "
              f"link: {link or 'unknown'}")  # fmt: skip
    return [Check.measured(name, size / s / 1e9, detail=detail, extra={"bytes": size, "link": link})
            for name, s in seconds.items()]  # fmt: skip


def _pinned_s(torch: Any, size: int, repeats: int) -> dict[str, float]:
    """Seconds per copy of ``size`` bytes host→device and device→host (pinned host memory)."""
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    return {
        "h2d.pinned": cuda_median_s(torch, lambda: device.copy_(host, non_blocking=True),
                                    repeats=repeats, inner=3),
        "d2h.pinned": cuda_median_s(torch, lambda: host.copy_(device, non_blocking=True),
                                    repeats=repeats, inner=3),
    }  # fmt: skip


def pcie_link() -> str | None:
    """GPU 0's PCIe link now and at most (``gen5 x16 (max gen5 x16)``), None without NVML."""
    lib, _why = nvml()
    if lib is None:
        return None
    try:
        handle: Any = lib.nvmlDeviceGetHandleByIndex(0)
        gen, width = (
            lib.nvmlDeviceGetCurrPcieLinkGeneration(handle),
            lib.nvmlDeviceGetCurrPcieLinkWidth(handle),
        )
        top, top_width = (
            lib.nvmlDeviceGetMaxPcieLinkGeneration(handle),
            lib.nvmlDeviceGetMaxPcieLinkWidth(handle),
        )
        return f"gen{gen} x{width} (max gen{top} x{top_width})"
    except Exception:  # some virtualised GPUs do not report it
        return None
    finally:
        lib.nvmlShutdown()
