"""A small CPU training example on the gpulease in-job runtime: an MLP on scikit-learn's bundled
8×8 digits (no download).

Runs alone (``python train_digits.py``) or as one of several DDP processes under torchrun
(``torchrun --nnodes=2 --node_rank=R --master_addr=A --master_port=P --nproc_per_node=1
train_digits.py``). ``gpulease.train`` does the plumbing: ``setup_distributed`` joins the process
group (gloo on CPU, NCCL on GPU), ``setup_precision`` picks autocast/GradScaler, ``tuned_loader``
shards and shuffles the data with a resumable position, ``CheckpointManager`` saves model,
optimizer, loader position and RNG every ``--save-every`` steps (to ``--checkpoint-dir`` or
``$GPULEASE_CHECKPOINT_DIR``, which gpulease sets on its nodes) and resumes from the newest
complete checkpoint, and a preemption notice (SIGTERM) saves once more and exits with code 75.
Deterministic for a given seed — a resumed run ends with the same weights as an uninterrupted one.
At the end rank 0 exports the model to ONNX with ``export_onnx`` (checked against onnxruntime) for
examples/serve-digits: to ``--onnx PATH`` (or ``$GPULEASE_ONNX``), by default ``model.onnx``
beside the checkpoints (else beside ``--save-weights``) when the ``onnx`` extra is installed;
``--onnx off`` skips it.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import sys
import time
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import TensorDataset

from gpulease.train import (
    CheckpointManager,
    StepTimer,
    cleanup_distributed,
    exit_preempted,
    on_preemption,
    setup_distributed,
    setup_precision,
    should_stop,
    tuned_loader,
)


def data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y
    )
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def accuracy(net: nn.Module, test: TensorDataset) -> float:
    net.eval()
    with torch.no_grad():
        x, y = test.tensors
        return float((net(x).argmax(dim=1) == y).float().mean())


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--precision", default="fp32", help="fp32 | tf32 | bf16 | fp16")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GPULEASE_CHECKPOINT_DIR"))
    parser.add_argument("--save-every", type=int, default=20, help="steps between checkpoints")
    parser.add_argument("--save-weights", type=Path, help="write the final weights here")
    parser.add_argument(
        "--step-delay", type=float, default=0.0, help="sleep per step (to watch or interrupt it)"
    )
    parser.add_argument(
        "--onnx",
        default=os.environ.get("GPULEASE_ONNX"),
        help="export the final model to this ONNX file, or 'off' (default: model.onnx beside the "
        "checkpoints, else beside --save-weights, when the onnx extra is installed)",
    )
    return parser.parse_args()


def onnx_target(args: argparse.Namespace) -> Path | None:
    """Where to export the model: ``--onnx``, else beside the checkpoints, else beside
    ``--save-weights``; None to skip. A path asked for without the onnx extra installed is exit 2
    at once (before training, not after it)."""
    if args.onnx and args.onnx.lower() in {"off", "no", "none", "0", "false"}:
        return None
    if not all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime", "onnxscript")):
        missing = "the onnx extra is not installed (pip install 'gpulease[onnx]')"
        if args.onnx:
            print(f"error: --onnx {args.onnx}: {missing}", file=sys.stderr, flush=True)
            sys.exit(2)
        print(f"ONNX export skipped: {missing}", flush=True)
        return None
    if args.onnx:
        return Path(args.onnx)
    if args.checkpoint_dir or args.save_weights:
        return Path(args.checkpoint_dir or args.save_weights.parent) / "model.onnx"
    print("ONNX export skipped: no --onnx PATH, --checkpoint-dir or --save-weights", flush=True)
    return None


def export(net: nn.Module, target: Path) -> None:
    """The final model → ONNX at ``target``, checked against onnxruntime by ``export_onnx``."""
    from gpulease.train import export_onnx

    # torch's exporter warns once per torchvision operator when torchvision is absent: noise here
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    target.parent.mkdir(parents=True, exist_ok=True)
    res = export_onnx(
        net, torch.zeros(2, 64), target, input_names=["input"], output_names=["logits"]
    )
    print(f"exported ONNX model to {res.path} (opset {res.opset}, {res.exporter})", flush=True)


def finish(
    args: argparse.Namespace,
    net: nn.Module,
    test: TensorDataset,
    world_size: int,
    onnx_path: Path | None,
) -> None:
    """Rank 0 at the end: the test accuracy, the final weights and the ONNX export."""
    print(f"test accuracy {accuracy(net, test):.4f} (world size {world_size})", flush=True)
    if args.save_weights:
        torch.save(net.state_dict(), args.save_weights)
    if onnx_path:
        export(net, onnx_path)


def main() -> None:
    args = arguments()
    onnx_path = onnx_target(args)
    info = setup_distributed(timeout_s=120)
    torch.manual_seed(args.seed)
    train, test = data(args.seed)
    net = model()
    params = sum(p.numel() for p in net.parameters())
    ddp = nn.parallel.DistributedDataParallel(net) if info.world_size > 1 else net
    precision = setup_precision(args.precision)
    loader = tuned_loader(train, args.batch_size, seed=args.seed, num_workers=0)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    state = {"model": net, "optimizer": optimizer, "loader": loader, "precision": precision}

    mgr = CheckpointManager(args.checkpoint_dir, keep=3) if args.checkpoint_dir else None
    step = (mgr.restore(**state) if mgr else None) or 0
    if step and info.is_main:
        print(f"resumed from step {step} (epoch {loader.epoch + 1})", flush=True)
    on_preemption()
    timer = StepTimer(flops_per_sample=6 * params, precision=precision.effective)

    while loader.epoch < args.epochs:
        epoch, total, seen = loader.epoch, 0.0, 0
        ddp.train()
        for x, y in loader:
            with timer.step(samples=len(x) * info.world_size):
                optimizer.zero_grad()
                with precision.autocast():
                    loss = loss_fn(ddp(x), y)
                precision.backward(loss)
                precision.step(optimizer)
            step += 1
            total, seen = total + float(loss.detach()) * len(x), seen + len(x)
            if mgr and (step % args.save_every == 0 or should_stop()):
                mgr.save(step, **state, extra={"epoch": epoch})
            if should_stop():  # preempted: the checkpoint above is the one to resume from
                if mgr:
                    mgr.wait()
                if info.is_main:
                    print(f"preempted at step {step}; checkpoint saved", flush=True)
                exit_preempted()
            time.sleep(args.step_delay)
        if info.is_main and seen:
            speed = timer.throughput() if timer.measured else "warming up"  # a resumed tail
            print(f"epoch {epoch + 1}/{args.epochs} loss {total / seen:.4f} | {speed}", flush=True)
    if mgr:
        mgr.save(step, **state, extra={"epoch": args.epochs, "final": True})
        mgr.wait()
    if info.is_main:
        finish(args, net, test, info.world_size, onnx_path)
    cleanup_distributed()


if __name__ == "__main__":
    main()
