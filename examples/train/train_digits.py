"""A small CPU training example: an MLP on scikit-learn's bundled 8×8 digits (no download).

Runs alone (``python train_digits.py``) or as one of several DDP processes under torchrun
(``torchrun --nnodes=2 --node_rank=R --master_addr=A --master_port=P --nproc_per_node=1
train_digits.py``): with ``WORLD_SIZE`` > 1 it joins a gloo process group and shards the training
set with a DistributedSampler. Deterministic for a given seed; prints the test accuracy.
"""

from __future__ import annotations

import argparse
import datetime
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(args.seed)
    train, test = data(args.seed)
    net: nn.Module = model()
    if world > 1:
        net = nn.parallel.DistributedDataParallel(net)
    sampler = (
        DistributedSampler(train, num_replicas=world, rank=rank, seed=args.seed)
        if world > 1
        else None
    )
    loader = DataLoader(
        train,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        generator=torch.Generator().manual_seed(args.seed),
    )
    optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        net.train()
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            optimizer.step()
            total += float(loss) * len(x)
        if rank == 0:
            print(
                f"epoch {epoch + 1}/{args.epochs} loss {total / len(loader.dataset):.4f}",
                flush=True,
            )
    if rank == 0:
        print(f"test accuracy {accuracy(net, test):.4f} (world size {world})", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
