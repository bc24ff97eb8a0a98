"""The bench's checks, one module per family (:data:`FAMILY_CHECKS`), each a function
``(options, ctx) -> list[Check]`` the runner calls in order. :class:`CheckContext` is what they
share: the device found here (:mod:`.device`), the datasheet spec of the accelerator the node
should have, the timer they measure with, and the process group of the cross-node checks
(opened on first use, closed by the runner). Importing this package loads neither numpy nor
torch.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpulease.bench.report import Check, unit_of

if TYPE_CHECKING:
    from gpulease.bench.checks.cluster import ClusterGroup
    from gpulease.bench.options import BenchOptions
    from gpulease.catalog.types import AcceleratorSpec

#: family → (module under this package, function, the names it reports when it cannot run)
FAMILY_CHECKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "gpu": ("gpu", "gpu_checks", ("gpu.count", "gpu.memory", "gpu.topology")),
    "matmul": ("matmul", "matmul_checks", ("matmul.fp32",)),
    "memory": ("memory", "memory_checks", ("memory.bandwidth",)),
    "transfer": ("transfer", "transfer_checks", ("h2d.pinned", "d2h.pinned")),
    "allreduce": ("allreduce", "allreduce_checks", ("allreduce.node", "allreduce.cluster")),
    "net": ("allreduce", "net_checks", ("net.latency",)),
    "disk": ("disk", "disk_checks", ("disk.seq_write", "disk.seq_read", "disk.rand_read_iops")),
    "store": ("store", "store_checks", ("store.read",)),
    "train": ("train", "train_checks", ("train.resnet50", "train.gpt_block")),
}


@dataclass(slots=True)
class CheckContext:
    """What the checks of one run share.

    ``device``: ``cuda`` when torch sees the GPUs, else ``cpu`` (``no_cuda`` then says why,
    in words a skipped check repeats); ``gpu_count`` / ``gpu_name``: what NVML or torch found
    (a node whose driver works but torch is missing still counts its GPUs); ``spec``: the
    datasheet of the part the node should have (:func:`gpulease.bench.references.spec_for`),
    None on a CPU node or an unknown part; ``timer``: seconds, monotonic (injected in tests).
    """

    device: Literal["cpu", "cuda"]
    gpu_count: int
    gpu_name: str | None
    spec: AcceleratorSpec | None
    no_cuda: str | None = None
    timer: Callable[[], float] = time.perf_counter
    cluster: ClusterGroup | None = None
    notes: dict[str, Any] = field(default_factory=dict)  # facts one check leaves for another


CheckFunction = Callable[["BenchOptions", CheckContext], list[Check]]


def gpus_unusable(name: str, ctx: CheckContext) -> Check | None:
    """Check ``name`` on a node whose GPUs torch cannot use: ``fail`` (a driver or CUDA
    mismatch: the node is broken for GPU work), ``skip`` when torch is not installed at all;
    None when there is no such problem (torch runs on the GPUs, or there are none)."""
    if ctx.device == "cuda" or ctx.gpu_count == 0:
        return None
    why = f"{ctx.gpu_count} GPUs here, but {ctx.no_cuda}"
    if importlib.util.find_spec("torch") is None:
        return Check.skipped(name, why)
    return Check(name, None, unit_of(name), verdict="fail", detail=why)


def failed(name: str, exc: BaseException) -> Check:
    """Check ``name`` failed with ``exc`` (no figure; the error in its detail)."""
    return Check(name, None, unit_of(name), verdict="fail", detail=f"{type(exc).__name__}: {exc}")
