"""GPU check of ``gpulease.train``: what mixed precision, TF32 and checkpointing buy on this GPU.

    python benchmarks/gpu/run.py [--out PATH.json] [--allow-cpu] [--d-model 4096] [--seq 2048]
                                 [--batch 8] [--steps 10] [--ckpt-mb 1536] [--scratch DIR]

(``benchmarks/gpu_check.sh`` runs it under a 5-minute limit.) Measured in one run:

1. **Transformer block**: one ``nn.TransformerEncoderLayer`` (pre-norm, FFN 4×d, no dropout),
   forward + backward + AdamW step, timed with :class:`gpulease.train.StepTimer` in fp32 (TF32
   off), tf32, bf16 and fp16 (each set up by :func:`gpulease.train.setup_precision`); speed-ups are
   fp32 step time ÷ mode step time.
2. **Matmul**: an 8192² fp32 matmul with TF32 off and on (and bf16 for reference), in TFLOPS.
3. **Checkpoint to local disk**: ``CheckpointManager(async_save=False).save`` of a ~1.5 GB state
   held on the GPU, against a raw sequential write + fsync of the same number of bytes.
4. **MFU** of each block run against the catalog's dense peak for its precision (headline: bf16).
5. **Async save stall**: the bf16 block + AdamW trained with an async ``CheckpointManager`` save
   every few steps against the same loop without saves: what ``save`` blocks (the copy to pinned
   host memory) and the whole stall per save, as a share of a step and of the save interval.

Block FLOPs per token (training = forward + backward = 3 × forward; a multiply-add is 2 FLOPs):
``3 × (8·d² + 4·d·f + 4·S·d)`` — Q, K, V and output projections ``4·d²`` MACs, the FFN ``2·d·f``
MACs, attention scores QKᵀ and the weighted sum AV ``2·S·d`` MACs (non-causal, all S keys).
Layer norms, softmax, biases and the optimizer are left out (under 1 % here), as is the
recomputation flash attention does in the backward (MFU counts model FLOPs only).

Results go to ``--out`` (default ``benchmarks/gpu/results/<date>-<part>.json``) and a Markdown
summary next to it (``.md``), rewritten after each section so a timeout keeps what finished; a
table is printed. Without a GPU it exits 2 with a message, or with ``--allow-cpu`` runs a tiny CPU
smoke version (for the tests; its figures mean nothing) and exits 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
MODES = ("fp32", "tf32", "bf16", "fp16")
FORMULA = "3 * (8*d^2 + 4*d*f + 4*S*d) per token (f = 4*d)"


@dataclasses.dataclass(frozen=True)
class Sizes:
    d_model: int
    heads: int
    seq: int
    batch: int
    steps: int
    warmup: int
    matmul_n: int
    matmul_iters: int
    ckpt_mb: int


GPU_SIZES = Sizes(4096, 32, 2048, 8, 10, 3, 8192, 20, 1536)
CPU_SIZES = Sizes(64, 2, 16, 4, 3, 1, 128, 3, 8)


def block_flops_per_token(d_model: int, ffn: int, seq: int) -> float:
    """Training FLOPs per token of one encoder layer (see the module docstring)."""
    return 3.0 * (8 * d_model**2 + 4 * d_model * ffn + 4 * seq * d_model)


# -- 1. transformer block ------------------------------------------------------------------------


def _block_run(mode: str, sizes: Sizes, batch: int, device: Any) -> dict[str, Any]:
    import torch

    from gpulease.train import StepTimer, setup_precision

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prec = setup_precision(mode, device)
    torch.manual_seed(0)
    d, ffn = sizes.d_model, 4 * sizes.d_model
    layer = torch.nn.TransformerEncoderLayer(
        d, sizes.heads, ffn, dropout=0.0, batch_first=True, norm_first=True, device=device
    )
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
    x = torch.randn(batch, sizes.seq, d, device=device)
    timer = StepTimer(
        flops_per_token=block_flops_per_token(d, ffn, sizes.seq),
        precision=prec.effective,
        warmup=sizes.warmup,
        window=sizes.steps,
    )
    for _ in range(sizes.warmup + sizes.steps):
        with timer.step(samples=batch, tokens=batch * sizes.seq):
            with prec.autocast():
                loss = layer(x).float().pow(2).mean()
            prec.backward(loss)
            prec.step(opt)
            opt.zero_grad(set_to_none=True)
    result = timer.throughput()
    return {
        "effective": prec.effective,
        "fallback": [str(w.message) for w in caught],
        "batch": batch,
        "step_ms": result.step_time_s * 1000,
        "tokens_per_s": result.tokens_per_s,
        "achieved_tflops": result.achieved_tflops,
        "peak_tflops": result.peak_tflops,
        "mfu": result.mfu,
    }


def _free(device: Any) -> None:
    import gc

    import torch

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def block(sizes: Sizes, device: Any) -> dict[str, Any]:
    """Step time of the block in each mode; fp32 first, halving the batch on out-of-memory."""
    import torch

    batch = sizes.batch
    modes: dict[str, Any] = {}
    for mode in MODES:
        while True:
            try:
                modes[mode] = _block_run(mode, sizes, batch, device)
                break
            except torch.cuda.OutOfMemoryError:
                _free(device)
                if mode != "fp32" or batch == 1:
                    raise
                batch //= 2
        _free(device)
    base = modes["fp32"]["step_ms"]
    for entry in modes.values():
        entry["speedup_vs_fp32"] = base / entry["step_ms"]
    ffn = 4 * sizes.d_model
    return {
        "d_model": sizes.d_model,
        "heads": sizes.heads,
        "ffn": ffn,
        "seq": sizes.seq,
        "batch": batch,
        "flops_per_token": block_flops_per_token(sizes.d_model, ffn, sizes.seq),
        "formula": FORMULA,
        "modes": modes,
    }


# -- 2. matmul -----------------------------------------------------------------------------------


def _matmul_tflops(n: int, iters: int, device: Any, dtype: Any) -> float:
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    _sync(device)
    seconds = (time.perf_counter() - start) / iters
    return 2 * n**3 / seconds / 1e12


def matmul(sizes: Sizes, device: Any, part: str | None) -> dict[str, Any]:
    """fp32 matmul TFLOPS with TF32 off and on, bf16 for reference, and the catalog's peaks."""
    import torch

    from gpulease.train import setup_precision
    from gpulease.train.timer import peak_tflops

    n, iters = sizes.matmul_n, sizes.matmul_iters
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        setup_precision("fp32", device)
        fp32 = _matmul_tflops(n, iters, device, torch.float32)
        tf32_mode = setup_precision("tf32", device).effective
        tf32 = _matmul_tflops(n, iters, device, torch.float32)
        setup_precision("fp32", device)
    bf16 = _matmul_tflops(n, iters, device, torch.bfloat16)
    peaks = {p: peak_tflops(part, p) for p in ("fp32", "tf32", "bf16")} if part else {}
    return {
        "n": n,
        "fp32_tflops": fp32,
        "tf32_tflops": tf32,
        "tf32_effective": tf32_mode,
        "bf16_tflops": bf16,
        "tf32_speedup": tf32 / fp32,
        "catalog_peaks": peaks,
    }


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


# -- 3. checkpoint -------------------------------------------------------------------------------


def _filesystem(path: Path) -> str:
    """The type of the file system holding ``path`` (from /proc/mounts; "" if unknown)."""
    best, kind = "", ""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return ""
    resolved = str(path.resolve())
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and resolved.startswith(fields[1]) and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind


def _raw_write(path: Path, tensors: list[Any]) -> float:
    start = time.perf_counter()
    with path.open("wb") as fh:
        for tensor in tensors:
            fh.write(memoryview(tensor.numpy()).cast("B"))
        fh.flush()
        os.fsync(fh.fileno())
    return time.perf_counter() - start


def checkpoint(sizes: Sizes, device: Any, scratch: Path) -> dict[str, Any]:
    """Seconds and GB/s of a synchronous CheckpointManager save vs a raw write + fsync."""
    import torch

    from gpulease.train import CheckpointManager

    pieces = 8
    numel = sizes.ckpt_mb * 2**20 // 4 // pieces
    state = torch.nn.Module()
    for i in range(pieces):
        state.register_buffer(f"b{i}", torch.randn(numel, device=device))
    _sync(device)
    scratch.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="gpu-check-ckpt-", dir=scratch))
    try:
        mgr = CheckpointManager(directory / "ckpt", keep=1, async_save=False)
        start = time.perf_counter()
        mgr.save(1, state=state)
        saved_s = time.perf_counter() - start
        written = sum(f.stat().st_size for f in (directory / "ckpt").rglob("*") if f.is_file())
        host = [t.detach().cpu() for t in state.buffers()]
        raw_s = _raw_write(directory / "raw.bin", host)
        raw_bytes = (directory / "raw.bin").stat().st_size
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "state_bytes": raw_bytes,
        "checkpoint_bytes": written,
        "manager_s": saved_s,
        "manager_gb_s": written / saved_s / 1e9,
        "raw_s": raw_s,
        "raw_gb_s": raw_bytes / raw_s / 1e9,
        "manager_vs_raw": (written / saved_s) / (raw_bytes / raw_s),
        "scratch": str(scratch),
        "filesystem": _filesystem(scratch),
    }


def stall(sizes: Sizes, device: Any, scratch: Path) -> dict[str, Any]:
    """Training stall per async save: the bf16 block trained with and without saves.

    The model (weights + AdamW state, ~12·d² parameters) is saved every ``steps // 2`` steps with
    ``CheckpointManager(async_save=True)``; the stall per save is the extra loop time over the
    same loop without saves, against the plain step time. ``blocking`` is the part ``save``
    itself takes (the device → pinned host copy).
    """
    import torch

    from gpulease.train import CheckpointManager, setup_precision

    prec = setup_precision("bf16", device)
    torch.manual_seed(0)
    d = sizes.d_model
    layer = torch.nn.TransformerEncoderLayer(
        d, sizes.heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True, device=device
    )
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-4)
    x = torch.randn(sizes.batch, sizes.seq, d, device=device)

    def train_step() -> None:
        with prec.autocast():
            loss = layer(x).float().pow(2).mean()
        prec.backward(loss)
        prec.step(opt)
        opt.zero_grad(set_to_none=True)

    scratch.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="gpu-check-stall-", dir=scratch))
    steps, every = 2 * sizes.steps, max(1, sizes.steps // 2)
    try:
        mgr = CheckpointManager(directory, keep=2, async_save=True)
        for _ in range(sizes.warmup):
            train_step()
        mgr.save(0, model=layer, opt=opt)  # allocates the pinned staging buffers
        mgr.wait()

        def loop(save: bool) -> tuple[float, list[float]]:
            blocking: list[float] = []
            _sync(device)
            start = time.perf_counter()
            for step in range(1, steps + 1):
                train_step()
                if save and step % every == 0:
                    t0 = time.perf_counter()
                    mgr.save(step, model=layer, opt=opt)
                    blocking.append(time.perf_counter() - t0)
            _sync(device)
            elapsed = time.perf_counter() - start
            mgr.wait()
            return elapsed, blocking

        plain, _ = loop(save=False)
        saving, blocking = loop(save=True)
        plain = min(plain, loop(save=False)[0])
        checkpoint_bytes = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file()) / 2
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    step_s = plain / steps
    extra = max(0.0, saving - plain) / len(blocking)
    return {
        "checkpoint_bytes": checkpoint_bytes,
        "steps": steps,
        "save_every": every,
        "step_ms": step_s * 1000,
        "blocking_ms": 1000 * sorted(blocking)[len(blocking) // 2],
        "stall_per_save_ms": extra * 1000,
        "stall_share_of_step": extra / step_s,
        "stall_share_of_interval": extra / (every * step_s),
    }


# -- report --------------------------------------------------------------------------------------


def _fmt(value: Any, spec: str = ".2f") -> str:
    return "–" if value is None else format(value, spec)


def markdown(results: dict[str, Any]) -> str:
    """The summary tables of ``results`` (what finished so far)."""
    lines = [
        f"# GPU check {results['date']} — {results['gpu'] or 'no GPU (CPU smoke run)'}",
        "",
        f"part {results['accelerator'] or '–'}, torch {results['torch']}, "
        f"CUDA {results['cuda'] or '–'}, {results['seconds']:.0f} s",
    ]
    if results.get("note"):
        lines += ["", f"**{results['note']}**"]
    if "block" in results:
        blk = results["block"]
        lines += [
            "",
            f"Transformer block d={blk['d_model']} heads={blk['heads']} seq={blk['seq']} "
            f"batch={blk['batch']} (fwd+bwd+AdamW; FLOPs {blk['formula']}):",
            "",
            "| mode | effective | step (ms) | × fp32 | tokens/s | TFLOPS | peak | MFU |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for mode, r in blk["modes"].items():
            lines.append(
                f"| {mode} | {r['effective']} | {r['step_ms']:.1f} | {r['speedup_vs_fp32']:.2f} "
                f"| {r['tokens_per_s']:,.0f} | {_fmt(r['achieved_tflops'], '.1f')} "
                f"| {_fmt(r['peak_tflops'], '.1f')} | {_fmt(r['mfu'], '.1%')} |"
            )
    if "matmul" in results:
        mm = results["matmul"]
        peaks = mm["catalog_peaks"]
        lines += [
            "",
            f"Matmul {mm['n']}²: fp32 {mm['fp32_tflops']:.1f} TFLOPS (peak "
            f"{_fmt(peaks.get('fp32'), '.1f')}), TF32 {mm['tf32_tflops']:.1f} (peak "
            f"{_fmt(peaks.get('tf32'), '.1f')}) → ×{mm['tf32_speedup']:.2f}; bf16 "
            f"{mm['bf16_tflops']:.1f} (peak {_fmt(peaks.get('bf16'), '.1f')}).",
        ]
    if "checkpoint" in results:
        ck = results["checkpoint"]
        lines += [
            "",
            f"Checkpoint {ck['checkpoint_bytes'] / 1e9:.2f} GB to {ck['scratch']} "
            f"({ck['filesystem'] or 'fs unknown'}): CheckpointManager {ck['manager_s']:.2f} s "
            f"({ck['manager_gb_s']:.2f} GB/s) vs raw write+fsync {ck['raw_s']:.2f} s "
            f"({ck['raw_gb_s']:.2f} GB/s) → ×{ck['manager_vs_raw']:.2f} of raw.",
        ]
    if "stall" in results:
        st = results["stall"]
        lines += [
            "",
            f"Async save of the bf16 block + AdamW ({st['checkpoint_bytes'] / 1e9:.2f} GB) every "
            f"{st['save_every']} steps: step {st['step_ms']:.1f} ms, save() blocks "
            f"{st['blocking_ms']:.1f} ms, stall per save {st['stall_per_save_ms']:.1f} ms = "
            f"{st['stall_share_of_step']:.1%} of a step, {st['stall_share_of_interval']:.2%} of "
            f"the interval.",
        ]
    return "\n".join(lines) + "\n"


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(results))


# -- main ----------------------------------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, help="JSON results (default results/<date>-<part>)")
    parser.add_argument("--allow-cpu", action="store_true", help="without a GPU: CPU smoke run")
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--seq", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--ckpt-mb", type=int, help="checkpoint state size in MB")
    parser.add_argument("--scratch", type=Path, help="checkpoint directory (default: --out's)")
    return parser.parse_args(argv)


def _sizes(args: argparse.Namespace, gpu: bool) -> Sizes:
    sizes = GPU_SIZES if gpu else CPU_SIZES
    changes = {
        "d_model": args.d_model,
        "seq": args.seq,
        "batch": args.batch,
        "steps": args.steps,
        "ckpt_mb": args.ckpt_mb,
    }
    sizes = dataclasses.replace(sizes, **{k: v for k, v in changes.items() if v is not None})
    return dataclasses.replace(sizes, heads=max(1, sizes.d_model // 128))


def _header(gpu: bool) -> dict[str, Any]:
    import torch

    from gpulease.train.timer import detect_accelerator

    return {
        "schema": 1,
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name() if gpu else None,
        "accelerator": detect_accelerator() if gpu else None,
        "cpu_smoke": not gpu,
        "note": "" if gpu else "no GPU: CPU smoke run, the figures are not GPU measurements",
        "complete": False,
        "seconds": 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    if str(ROOT / "src") not in sys.path:
        sys.path.insert(0, str(ROOT / "src"))  # the working tree's gpulease, installed or not
    args = _parse(argv)
    started = time.perf_counter()
    import torch

    gpu = torch.cuda.is_available()
    if not gpu and not args.allow_cpu:
        print(
            "gpu_check: no CUDA GPU visible (torch.cuda.is_available() is False); this check needs"
            " one. --allow-cpu runs a tiny CPU smoke version instead (its figures mean nothing).",
            file=sys.stderr,
        )
        return 2
    results = _header(gpu)
    if not gpu:
        print("gpu_check: no GPU on this machine — CPU smoke run only", flush=True)
    sizes = _sizes(args, gpu)
    slug = (results["accelerator"] or ("gpu" if gpu else "cpu")).lower()
    out = args.out or RESULTS / f"{results['date']}-{slug}.json"
    device = torch.device("cuda" if gpu else "cpu")
    sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("block", lambda: block(sizes, device)),
        ("matmul", lambda: matmul(sizes, device, results["accelerator"])),
        ("checkpoint", lambda: checkpoint(sizes, device, args.scratch or out.parent)),
        ("stall", lambda: stall(sizes, device, args.scratch or out.parent)),
    ]
    for name, run in sections:
        results[name] = run()
        results["seconds"] = time.perf_counter() - started
        _write(out, results)
    modes = results["block"]["modes"]
    results["mfu_bf16"] = modes["bf16"]["mfu"]
    results["complete"] = True
    _write(out, results)
    print(markdown(results))
    print(f"gpu_check: wrote {out} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
