"""A tiny deterministic training setup shared by the train tests and their child scripts."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def make(seed: int = 0, width: int = 16) -> tuple[torch.nn.Module, Any, Any]:
    """Model, Adam optimizer and a step scheduler, seeded."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, width), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(width, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    return model, opt, sched


def train_step(model: torch.nn.Module, opt: Any, sched: Any) -> None:
    """One step whose data depends on all three RNGs (torch, numpy, python)."""
    x = torch.randn(4, 8) + float(np.random.rand()) + random.random()
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]
