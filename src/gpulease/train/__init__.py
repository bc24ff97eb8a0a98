"""The in-job runtime of gpulease: what a training script imports on the leased machine.

``CheckpointManager`` saves models, optimizers, schedulers, RNG states and plain values
atomically (optionally async and encrypted); ``on_preemption`` / ``should_stop`` /
``exit_preempted`` turn the agent's SIGTERM notice into a clean exit with code 75.
``setup_precision`` picks autocast / GradScaler / TF32 for a mode, ``setup_distributed`` joins the
process group torchrun or the agent describes, and ``StepTimer`` / ``throughput`` report speed
and MFU against the catalog's dense peak; ``tuned_loader`` is a data loader tuned to the machine
whose position resumes exactly; ``train_stats`` / ``report_step`` / ``timed_batches`` tell the
node's agent the job's figures (step time, throughput, MFU, data-wait share, last checkpoint),
which those helpers also do by themselves; ``export_onnx`` exports a model and checks it with
onnxruntime; and ``profile`` records a few steps with ``torch.profiler`` into a trace and a
summary (top operators; compute, communication, data wait) that ``gpulease profile`` fetches.
Importing this package does not import torch.
"""

from __future__ import annotations

from gpulease.train.distributed import DistInfo, cleanup_distributed, setup_distributed
from gpulease.train.loader import LoaderSettings, ResumableLoader, tuned_loader
from gpulease.train.manager import CheckpointManager
from gpulease.train.onnx_export import OnnxExport, export_onnx
from gpulease.train.precision import Precision, setup_precision
from gpulease.train.preemption import (
    EXIT_PREEMPTED,
    exit_preempted,
    on_preemption,
    should_stop,
)
from gpulease.train.profiler import Profiler, profile
from gpulease.train.stats import TrainStats, report_step, timed_batches, train_stats
from gpulease.train.timer import StepTimer, Throughput, throughput

__all__ = [
    "EXIT_PREEMPTED",
    "CheckpointManager",
    "DistInfo",
    "LoaderSettings",
    "OnnxExport",
    "Precision",
    "Profiler",
    "ResumableLoader",
    "StepTimer",
    "Throughput",
    "TrainStats",
    "cleanup_distributed",
    "exit_preempted",
    "export_onnx",
    "on_preemption",
    "profile",
    "report_step",
    "setup_distributed",
    "setup_precision",
    "should_stop",
    "throughput",
    "timed_batches",
    "train_stats",
    "tuned_loader",
]
