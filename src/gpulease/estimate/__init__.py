"""Workload → memory, FLOPs and time per accelerator configuration, with low / high ranges.

Pure functions over :class:`gpulease.spec.models.Workload` and
:class:`gpulease.catalog.types.AcceleratorSpec`; no I/O. The optimizer calls
:func:`min_training_gpus` and :func:`estimate_training` / :func:`estimate_inference` per
configuration. Formulas, sources and the calibration against published runs: docs/estimate.md.

Modules: ``shapes`` (transformer shapes, FLOPs), ``memory`` (training and inference memory),
``mfu`` (peak and utilisation), ``scaling`` (multi-GPU / multi-node efficiency), ``training``,
``inference``, ``calibration`` (published runs and the estimator's error on each).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.estimate.inference import estimate_inference
from gpulease.estimate.memory import min_training_gpus, training_memory_gb
from gpulease.estimate.mfu import utilisation
from gpulease.estimate.results import HoursRange, InferenceEstimate, TrainingEstimate
from gpulease.estimate.scaling import scaling_efficiency
from gpulease.estimate.shapes import TransformerShape, training_flops, transformer_shape
from gpulease.estimate.training import estimate_training

if TYPE_CHECKING:
    from gpulease.estimate.calibration import CalibrationRow, calibration_report

__all__ = [
    "CalibrationRow",
    "HoursRange",
    "InferenceEstimate",
    "TrainingEstimate",
    "TransformerShape",
    "calibration_report",
    "estimate_inference",
    "estimate_training",
    "min_training_gpus",
    "scaling_efficiency",
    "training_flops",
    "training_memory_gb",
    "transformer_shape",
    "utilisation",
]


def __getattr__(name: str) -> Any:
    """Load the calibration table only when asked for: planning never needs it."""
    if name in {"CalibrationRow", "calibration_report"}:
        from gpulease.estimate import calibration

        return getattr(calibration, name)
    raise AttributeError(f"module 'gpulease.estimate' has no attribute {name!r}")
