"""Crash-safe training checkpoints and preemption handling for jobs run by gpulease.

``CheckpointManager`` saves models, optimizers, schedulers, RNG states and plain values
atomically (optionally async and encrypted); ``on_preemption`` / ``should_stop`` /
``exit_preempted`` turn the agent's SIGTERM notice into a clean exit with code 75.
"""

from __future__ import annotations

from gpulease.train.manager import CheckpointManager
from gpulease.train.preemption import (
    EXIT_PREEMPTED,
    exit_preempted,
    on_preemption,
    should_stop,
)

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointManager",
    "exit_preempted",
    "on_preemption",
    "should_stop",
]
