"""``train.resnet50`` (images/s) and ``train.gpt_block`` (tokens/s): MLPerf-style training
steps (forward, loss, backward, optimizer step) on synthetic data, per GPU. On a GPU: ResNet-50
itself at 224×224, batch 256, mixed precision (bf16 autocast; fp16 on parts without bf16),
channels-last, SGD with momentum — the configuration of the published per-GPU figures in
``bench/data/published.csv``, its reference where one is cited for the part — and a GPT-style
block (d_model 2048, 16 heads, 8 × 2048 tokens) in mixed precision, AdamW. On a CPU node,
the same shapes scaled down (ResNet-50's layout at a quarter of its width, 64×64 images; a
256-wide block) with no reference: peers and history judge them. Skipped without torch.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpulease.bench.checks import failed, gpus_unusable
from gpulease.bench.references import published_for
from gpulease.bench.report import Check

if TYPE_CHECKING:
    from gpulease.bench.checks import CheckContext
    from gpulease.bench.options import BenchOptions


@dataclass(frozen=True, slots=True)
class Shapes:
    resnet_width: int
    image: int
    images: int  # batch
    d_model: int
    heads: int
    seq: int
    sequences: int  # batch
    steps: int


GPU = Shapes(64, 224, 256, 2048, 16, 2048, 8, steps=10)
CPU = Shapes(16, 64, 8, 256, 4, 128, 4, steps=3)
WARMUP = 2


def train_checks(options: BenchOptions, ctx: CheckContext) -> list[Check]:
    if importlib.util.find_spec("torch") is None:
        why = "torch is not installed (the training steps need it)"
        return [Check.skipped("train.resnet50", why), Check.skipped("train.gpt_block", why)]

    unusable = [gpus_unusable(n, ctx) for n in ("train.resnet50", "train.gpt_block")]
    if unusable[0] is not None and unusable[1] is not None:
        return [unusable[0], unusable[1]]
    return training_steps(GPU if ctx.device == "cuda" else CPU, ctx)


def training_steps(shapes: Shapes, ctx: CheckContext) -> list[Check]:
    """Both workloads at ``shapes`` on ``ctx.device``; one failing keeps the other."""
    import torch

    autotune = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = ctx.device == "cuda"  # pick the fastest kernels, as MLPerf
    try:
        return [
            _one(torch, name, step, shapes, ctx)
            for name, step in (("train.resnet50", _resnet_step), ("train.gpt_block", _gpt_step))
        ]
    finally:
        torch.backends.cudnn.benchmark = autotune


def _one(torch: Any, name: str, step: Any, shapes: Shapes, ctx: CheckContext) -> Check:
    try:
        result: Check = step(torch, shapes, ctx)
        return result
    except torch.cuda.OutOfMemoryError as exc:
        return Check.skipped(name, f"does not fit in this GPU's memory: {exc}")
    except Exception as exc:  # one workload failing keeps the other
        return failed(name, exc)
    finally:
        if ctx.device == "cuda":
            torch.cuda.empty_cache()


def _timed_steps(torch: Any, step: Any, ctx: CheckContext, steps: int) -> float:
    """Seconds per step, after :data:`WARMUP` untimed steps."""
    for _ in range(WARMUP):
        step()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    start = ctx.timer()
    for _ in range(steps):
        step()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
    return (ctx.timer() - start) / steps


def _half(torch: Any) -> Any:
    """bf16 where the GPU has it, else fp16 (Volta, Turing)."""
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def _autocast(torch: Any, ctx: CheckContext) -> Any:
    if ctx.device == "cuda":
        return torch.autocast("cuda", dtype=_half(torch))
    return torch.autocast("cpu", enabled=False)


def _precision(torch: Any, ctx: CheckContext) -> str:
    if ctx.device != "cuda":
        return "fp32"
    return "mixed (bf16)" if _half(torch) == torch.bfloat16 else "mixed (fp16)"


def _resnet_step(torch: Any, shapes: Shapes, ctx: CheckContext) -> Check:
    from gpulease.bench.checks.nets import resnet50

    device = ctx.device
    memory_format = torch.channels_last if device == "cuda" else torch.contiguous_format
    model = resnet50(shapes.resnet_width).to(device)
    model = model.to(memory_format=memory_format)  # type: ignore[call-overload]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.256, momentum=0.875)
    images = torch.randn(shapes.images, 3, shapes.image, shapes.image, device=device)
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(0, 1000, (shapes.images,), device=device)

    def step() -> None:
        with _autocast(torch, ctx):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    seconds = _timed_steps(torch, step, ctx, shapes.steps)
    precision = _precision(torch, ctx)
    real = shapes.resnet_width == 64 and shapes.image == 224
    mixed = precision.split(" ")[0]
    cited = published_for(ctx.spec, "train.resnet50", mixed) if real else None
    what = (
        f"ResNet-50 at {shapes.image}×{shapes.image}"
        if real
        else f"ResNet-50's layout at width {shapes.resnet_width}, {shapes.image}×{shapes.image}"
    )
    source = f"; reference: {cited.source_url} ({cited.source_date})" if cited else ""
    return Check.measured("train.resnet50", shapes.images / seconds,
                          reference=cited.figure if cited else None, reference_source="published",
                          detail=f"{what}, batch {shapes.images}, {precision}, SGD, synthetic "
                          f"data, {shapes.steps} steps{source}",
                          extra={"batch": shapes.images, "image": shapes.image,
                                 "width": shapes.resnet_width, "precision": precision})  # fmt: skip


def _gpt_step(torch: Any, shapes: Shapes, ctx: CheckContext) -> Check:
    from gpulease.bench.checks.nets import GptBlock

    device = ctx.device
    model = GptBlock(shapes.d_model, shapes.heads).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randn(shapes.sequences, shapes.seq, shapes.d_model, device=device)

    def step() -> None:
        with _autocast(torch, ctx):
            loss = model(tokens).float().pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    seconds = _timed_steps(torch, step, ctx, shapes.steps)
    precision = _precision(torch, ctx)
    count = shapes.sequences * shapes.seq
    return Check.measured("train.gpt_block", count / seconds,
                          detail=f"one GPT block, d_model {shapes.d_model}, {shapes.heads} heads, "
                          f"{shapes.sequences}×{shapes.seq} tokens, {precision}, AdamW, "
                          f"{shapes.steps} steps (no published figure for one block)",
                          extra={"d_model": shapes.d_model, "seq": shapes.seq,
                                 "batch": shapes.sequences, "precision": precision})  # fmt: skip
