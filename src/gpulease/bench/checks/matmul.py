"""``matmul.<dtype>``: dense matrix-multiply throughput. On GPUs, per dtype the part has a
datasheet peak for (fp32, tf32, bf16, fp16, fp8 through ``torch._scaled_mm``), square sizes that
saturate it, on every GPU of the node at once (a throttling GPU among healthy ones shows: the
figure is the slowest GPU's, each GPU's in ``extra["per_gpu"]``), timed with CUDA events
(median of repeats after a warm-up), against the dense peak (``reference_source="datasheet"``).
On a CPU node, ``matmul.fp32`` with numpy (the BLAS numpy links), without a reference: peers
and history judge it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpulease.bench.checks import failed, gpus_unusable
from gpulease.bench.checks.timing import cuda_medians_s, median_s, slowest_gpu
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions

GPU_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")
CPU_SIZE = {True: 1024, False: 2048}  # quick: ~2 GFLOP a product
GPU_SIZE = {True: 8192, False: 16384}


def matmul_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    if ctx.device == "cuda":
        return gpu_matmul(options, ctx)
    return [gpus_unusable("matmul.fp32", ctx) or cpu_matmul(options, ctx)]


def cpu_matmul(options: BenchOptions, ctx: CheckContext) -> Check:
    """numpy fp32 ``n×n @ n×n``: 2n³ FLOPs, median of repeats."""
    import numpy as np

    n = CPU_SIZE[options.quick]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    repeats = 5 if options.quick else 9
    seconds = median_s(lambda: np.matmul(a, b, out=out), ctx.timer, repeats=repeats)
    tflops = 2 * n**3 / seconds / 1e12
    return Check.measured("matmul.fp32", tflops, detail=f"numpy {n}×{n} fp32, median of "
                          f"{repeats} (no datasheet for CPUs: judged by peers and history)",
                          extra={"n": n, "dtype": "fp32", "backend": "numpy"})  # fmt: skip


def gpu_dtypes(ctx: CheckContext) -> list[str]:
    """The dtypes to measure: those the part has a native datasheet peak for (all five when
    the part is not known, fp8 only where torch can run it)."""
    native = set(ctx.spec.tflops) if ctx.spec is not None else set(GPU_DTYPES)
    return [d for d in GPU_DTYPES if d in native]


def gpu_matmul(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    import torch

    checks = []
    for dtype in gpu_dtypes(ctx):
        try:
            checks.append(_gpu_dtype(torch, dtype, options, ctx))
        except Exception as exc:  # one dtype failing (fp8 unsupported, OOM) keeps the others
            name = f"matmul.{dtype}"
            if dtype == "fp8" and isinstance(exc, (RuntimeError, AttributeError)):
                checks.append(Check.skipped(name, f"fp8 matmul cannot run here: {exc}"))
            else:
                checks.append(failed(name, exc))
        finally:
            torch.cuda.empty_cache()
    return checks


def _product(torch: Any, dtype: str, n: int, device: int) -> Callable[[], object]:
    """One ``n×n @ n×n`` product in ``dtype`` on ``cuda:device``, operands made once."""
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
                   "fp16": torch.float16, "fp8": torch.bfloat16}[dtype]  # fmt: skip
    a = torch.randn(n, n, device=f"cuda:{device}", dtype=torch_dtype)
    b = torch.randn(n, n, device=f"cuda:{device}", dtype=torch_dtype)
    if dtype != "fp8":
        out = torch.empty(n, n, device=f"cuda:{device}", dtype=torch_dtype)
        return lambda: torch.mm(a, b, out=out)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.to(torch.float8_e4m3fn).t()  # _scaled_mm wants the second operand column-major
    one = torch.ones((), device=f"cuda:{device}", dtype=torch.float32)
    return lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)  # fmt: skip


def _gpu_dtype(torch: Any, dtype: str, options: BenchOptions, ctx: CheckContext) -> Check:
    """``matmul.<dtype>`` on every GPU at once; the figure is the slowest GPU's."""
    n = GPU_SIZE[options.quick] if dtype != "fp32" else GPU_SIZE[True]
    repeats = 5 if options.quick else 11
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        products = {d: _product(torch, dtype, n, d) for d in range(ctx.gpu_count)}
        seconds = cuda_medians_s(torch, products, repeats=repeats,
                                 inner=3 if options.quick else 5)  # fmt: skip
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    per_gpu = [2 * n**3 / s / 1e12 for s in seconds]
    slowest, where = slowest_gpu(per_gpu)
    peak = ctx.spec.tflops.get(dtype) if ctx.spec is not None else None
    part = ctx.notes.get("reference", "no datasheet")
    return Check.measured(f"matmul.{dtype}", per_gpu[slowest], reference=peak,
                          reference_source="datasheet",
                          detail=f"torch {n}×{n} {dtype} on {where}, CUDA events, median of "
                          f"{repeats}; reference: {part}, dense peak",
                          extra={"n": n, "dtype": dtype, "gpu": ctx.gpu_name,
                                 "per_gpu": [round(t, 1) for t in per_gpu]})  # fmt: skip
