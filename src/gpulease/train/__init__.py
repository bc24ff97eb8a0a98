"""The in-job runtime of gpulease: what a training script imports on the leased machine.

``CheckpointManager`` saves models, optimizers, schedulers, RNG states and plain values
atomically (optionally async and encrypted); ``on_preemption`` / ``should_stop`` /
``exit_preempted`` turn the agent's SIGTERM notice into a clean exit with code 75.
``setup_precision`` picks autocast / GradScaler / TF32 for a mode, ``setup_distributed`` joins the
process group torchrun or the agent describes, and ``StepTimer`` / ``throughput`` report speed
and MFU against the catalog's dense peak. Importing this package does not import torch.
"""

from __future__ import annotations

from gpulease.train.distributed import DistInfo, cleanup_distributed, setup_distributed
from gpulease.train.manager import CheckpointManager
from gpulease.train.precision import Precision, setup_precision
from gpulease.train.preemption import (
    EXIT_PREEMPTED,
    exit_preempted,
    on_preemption,
    should_stop,
)
from gpulease.train.timer import StepTimer, Throughput, throughput

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointManager",
    "DistInfo",
    "Precision",
    "StepTimer",
    "Throughput",
    "cleanup_distributed",
    "exit_preempted",
    "on_preemption",
    "setup_distributed",
    "setup_precision",
    "should_stop",
    "throughput",
]
