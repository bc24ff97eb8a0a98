"""Checkpoint benchmark for ``gpulease.train.CheckpointManager``.

    python benchmarks/checkpoint/run.py [--dir DIR] [--sizes 100,250,500,1000] [--repeat 5]
        [--stall-model-mb 1000] [--json results.json]

Three measurements, each against a baseline taken in the same run on the same disk:

1. **Write throughput** for states of 100 MB – 1 GB: ``save`` + ``wait`` (sync and async) until
   the checkpoint is durable (files fsynced, manifest written), against a raw sequential write of
   the same tensor bytes to one file with one ``fsync``, interleaved. Two regimes: *sustained*
   (every file kept: the disk takes a continuous stream) and *churn* (each write replaces the
   previous one, deletion timed on both sides). Target: ≥ 80 % of raw.
2. **Training stall per async save** for a model of ~1 GB of weights (plus its optimizer state):
   the extra wall time a training loop spends because of one async save (the blocking copy to host
   memory plus any slowdown of the steps while the background write runs), as a share of the plain
   step time, and amortised over the save interval. Measured with training on every core and on
   all but one (a GPU host's cores are free while the accelerator computes). Target: < 5 %.
3. **Wrapper overhead**: a small training loop written with the runtime (``tuned_loader``,
   ``StepTimer``, ``should_stop``, ``CheckpointManager``) against the same loop in plain torch
   (``DataLoader``, ``torch.save``).

Free disk is checked first: sizes that do not fit (with room for the kept checkpoints and the raw
file) are skipped, and the output says so.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpulease.storage.manifest import fsync_path

MB = 1_000_000
CHUNK_ELEMS = 16 * MB // 4  # 16 MB fp32 tensors, like the layers of a real model


class Blob(nn.Module):
    """A module holding ``mb`` megabytes of fp32 parameters in 16 MB tensors."""

    def __init__(self, mb: int) -> None:
        super().__init__()
        total = mb * MB // 4
        sizes = [CHUNK_ELEMS] * (total // CHUNK_ELEMS)
        if total % CHUNK_ELEMS:
            sizes.append(total % CHUNK_ELEMS)
        self.chunks = nn.ParameterList(nn.Parameter(torch.randn(n)) for n in sizes)


def raw_write(module: nn.Module, path: Path) -> float:
    """Seconds to write the module's tensor bytes sequentially to one file, fsynced."""
    start = time.perf_counter()
    with open(path, "wb") as fh:
        for tensor in module.state_dict().values():
            fh.write(memoryview(tensor.numpy()).cast("B"))
        fh.flush()
        os.fsync(fh.fileno())
    fsync_path(path.parent)
    return time.perf_counter() - start


def timed_save(mgr: Any, module: nn.Module, step: int) -> float:
    """Seconds from ``save`` to durable (``wait`` returned) for one checkpoint of ``module``."""
    start = time.perf_counter()
    mgr.save(step, model=module)
    mgr.wait()
    return time.perf_counter() - start


def _median(fn: Callable[[], float], repeat: int) -> float:
    values = []
    for _ in range(repeat):
        gc.collect()
        values.append(fn())
    return statistics.median(values)


def raw_replace(module: nn.Module, path: Path) -> float:
    """:func:`raw_write` after deleting the previous file at ``path``, both timed."""
    start = time.perf_counter()
    path.unlink(missing_ok=True)
    return raw_write(module, path) + (time.perf_counter() - start)


def throughput(
    root: Path, sizes: list[int], repeat: int, *, churn: bool = False
) -> list[dict[str, Any]]:
    """Save + wait in steady state (the manager's second and later saves) against raw writes.

    By default every file stays until the end of a size, so the disk absorbs a sustained stream
    (as checkpoints of a long run do). With ``churn`` each write replaces the previous one —
    ``keep=1`` for the manager, delete-then-write for raw, the deletion timed on both sides — and
    a host write cache can absorb bursts.
    """
    from gpulease.train import CheckpointManager

    rows = []
    for mb in sizes:
        free = shutil.disk_usage(root).free
        need = (3 if churn else 2 * (repeat + 1) + 1) * mb * MB + 500 * MB
        if free < need:
            print(f"skip {mb} MB: {free / MB:.0f} MB free on {root}, need {need / MB:.0f} MB")
            rows.append({"size_mb": mb, "skipped": f"not enough free disk ({free / MB:.0f} MB)"})
            continue
        module = Blob(mb)
        keep = 1 if churn else repeat + 1
        sync = CheckpointManager(root / "sync", keep=keep, async_save=False)
        asynchronous = CheckpointManager(root / "async", keep=keep, async_save=True)
        first_s = timed_save(sync, module, 0)  # allocates the host staging buffers
        timed_save(asynchronous, module, 0)
        raw_t, sync_t, async_t = [], [], []
        for step in range(1, repeat + 1):  # interleaved: the disk's speed drifts
            gc.collect()
            if churn:
                raw_t.append(raw_replace(module, root / "raw.bin"))
            else:
                raw_t.append(raw_write(module, root / f"raw-{step}.bin"))
            sync_t.append(timed_save(sync, module, step))
            async_t.append(timed_save(asynchronous, module, step))
        for leftover in ("sync", "async"):
            shutil.rmtree(root / leftover)
        for raw_file in root.glob("raw*.bin"):
            raw_file.unlink()
        raw_s, sync_s, async_s = (statistics.median(t) for t in (raw_t, sync_t, async_t))
        row = {
            "size_mb": mb,
            "regime": "churn" if churn else "sustained",
            "raw_mb_s": round(mb / raw_s),
            "sync_mb_s": round(mb / sync_s),
            "async_mb_s": round(mb / async_s),
            "first_save_mb_s": round(mb / first_s),
            "sync_vs_raw": round(raw_s / sync_s, 3),
            "async_vs_raw": round(raw_s / async_s, 3),
        }
        print(row)
        rows.append(row)
        del module
    return rows


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    loss = model(batch).square().mean()
    loss.backward()
    opt.step()


def stall(
    root: Path, model_mb: int, steps: int, every: int, *, threads: int, rounds: int = 2
) -> dict[str, Any]:
    """The extra loop time per async save, as a share of the plain step time.

    ``threads``: torch's compute threads for training. On a GPU host the accelerator computes and
    host cores are free for the background write; on a CPU-only machine the training's threads
    and the write compete for the same cores, so the script measures both.
    """
    from gpulease.train import CheckpointManager

    torch.set_num_threads(threads)
    free = shutil.disk_usage(root).free
    need = 3 * 3 * model_mb * MB  # weights + two Adam moments, kept=2 plus one in flight
    if free < need:
        return {"skipped": f"not enough free disk ({free / MB:.0f} MB free, need {need / MB:.0f})"}
    width = 4096
    layers = max(1, round(model_mb * MB / 4 / (width * width)))
    model = nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = torch.randn(64, width)
    weights_mb = sum(p.numel() for p in model.parameters()) * 4 / MB
    for _ in range(2):  # warm-up: allocate the Adam state
        _train_step(model, opt, batch)

    mgr = CheckpointManager(root / "stall", keep=2, async_save=True)
    first = time.perf_counter()
    mgr.save(0, model=model, opt=opt)  # the first save allocates the host staging buffers
    first_blocking = time.perf_counter() - first
    mgr.wait()

    def loop(save: bool) -> tuple[float, list[float]]:
        blocking = []
        start = time.perf_counter()
        for step in range(1, steps + 1):
            _train_step(model, opt, batch)
            if save and step % every == 0:
                t0 = time.perf_counter()
                mgr.save(step, model=model, opt=opt)
                blocking.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start  # the last write may still run: that is the point
        mgr.wait()
        return elapsed, blocking

    plain_runs, saving_runs, blocking = [], [], []
    for _ in range(rounds):  # alternated: the machine's speed drifts between loops
        plain_runs.append(loop(save=False)[0])
        elapsed, blocked = loop(save=True)
        saving_runs.append(elapsed)
        blocking += blocked
    shutil.rmtree(root / "stall", ignore_errors=True)
    plain, saving = statistics.mean(plain_runs), statistics.mean(saving_runs)
    step_s = plain / steps
    saves = steps // every
    extra_per_save = max(0.0, saving - plain) / saves
    torch.set_num_threads(os.cpu_count() or 1)
    return {
        "train_threads": threads,
        "weights_mb": round(weights_mb),
        "checkpoint_mb": round(3 * weights_mb),
        "steps": steps,
        "rounds": rounds,
        "save_every": every,
        "step_s": round(step_s, 3),
        "first_save_blocking_s": round(first_blocking, 3),
        "blocking_per_save_s": round(statistics.median(blocking), 3),
        "stall_per_save_s": round(extra_per_save, 3),
        "stall_share_of_step": round(extra_per_save / step_s, 3),
        "stall_share_of_interval": round(extra_per_save / (every * step_s), 4),
    }


def overhead(root: Path, steps: int, repeat: int) -> dict[str, Any]:
    """A small loop with the runtime vs the same loop in plain torch (median of ``repeat``).

    Twice: without checkpoints (what ``tuned_loader``, ``StepTimer`` and ``should_stop`` cost per
    step) and with one every ``steps // 5`` steps (``CheckpointManager.save`` — atomic, fsynced,
    verified — against a bare ``torch.save``, which is neither).
    """
    from torch.utils.data import DataLoader, TensorDataset

    from gpulease.train import CheckpointManager, StepTimer, should_stop, tuned_loader

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * 32, 256), torch.randint(0, 10, (steps * 32,)))
    every = max(1, steps // 5)

    def make() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
        return model, torch.optim.SGD(model.parameters(), lr=0.01)

    def step(
        model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> None:
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    def plain(save: bool) -> float:
        model, opt = make()
        loader = DataLoader(data, batch_size=32, shuffle=True, num_workers=0)
        start = time.perf_counter()
        for i, (x, y) in enumerate(loader, 1):
            step(model, opt, x, y)
            if save and i % every == 0:
                state = {"model": model.state_dict(), "opt": opt.state_dict()}
                torch.save(state, root / "plain.pt")
        return time.perf_counter() - start

    def runtime(save: bool) -> float:
        model, opt = make()
        loader = tuned_loader(data, 32, num_workers=0)
        mgr = CheckpointManager(root / "runtime", keep=2)
        timer = StepTimer()
        start = time.perf_counter()
        for i, (x, y) in enumerate(loader, 1):
            with timer.step(samples=len(x)):
                step(model, opt, x, y)
            if save and (i % every == 0 or should_stop()):
                mgr.save(i, model=model, opt=opt, loader=loader)
            elif should_stop():
                break
        mgr.wait()
        return time.perf_counter() - start

    result: dict[str, Any] = {"steps": steps, "saves": steps // every}
    for label, save in (("no_checkpoints", False), ("with_checkpoints", True)):
        plain(save), runtime(save)  # warm-up (allocator, first-touch, caches)
        plain_t, runtime_t = [], []
        for _ in range(repeat):  # alternated: the machine's speed drifts
            plain_t.append(plain(save))
            runtime_t.append(runtime(save))
        plain_s, runtime_s = statistics.median(plain_t), statistics.median(runtime_t)
        result[label] = {
            "plain_s": round(plain_s, 3),
            "runtime_s": round(runtime_s, 3),
            "overhead": round(runtime_s / plain_s - 1, 3),
            "per_step_us": round((runtime_s - plain_s) / steps * 1e6, 1),
        }
    shutil.rmtree(root / "runtime", ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, default=None, help="Disk to test (default: a temp dir)."
    )
    parser.add_argument("--sizes", default="100,250,500,1000", help="State sizes in MB.")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--stall-model-mb", type=int, default=1000)
    parser.add_argument("--stall-steps", type=int, default=15)
    parser.add_argument("--stall-every", type=int, default=5)
    parser.add_argument("--overhead-steps", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpulease-ckpt-bench-", dir=parent) as tmp:
        root = Path(tmp)
        sizes = [int(s) for s in args.sizes.split(",")]
        results: dict[str, Any] = {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cpus": os.cpu_count(),
            "dir": str(parent),
            "throughput": throughput(root, sizes, args.repeat)
            + throughput(root, sizes, args.repeat, churn=True),
        }
        cpus = os.cpu_count() or 1
        results["stall"] = [
            stall(root, args.stall_model_mb, args.stall_steps, args.stall_every, threads=threads)
            for threads in sorted({cpus, max(1, cpus - 1)})
            if args.stall_model_mb
        ]
        print("stall", results["stall"])
        results["overhead"] = overhead(root, args.overhead_steps, args.repeat)
        print("overhead", results["overhead"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
