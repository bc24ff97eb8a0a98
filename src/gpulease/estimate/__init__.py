"""Workload → memory, FLOPs and time per accelerator configuration, with low / high ranges.

Pure functions over :class:`gpulease.spec.models.Workload` and
:class:`gpulease.catalog.types.AcceleratorSpec`; no I/O. The optimizer calls
:func:`min_training_gpus` and :func:`estimate_training` / :func:`estimate_inference` per
configuration. Formulas, sources and the calibration against published runs: docs/estimate.md.

Modules: ``shapes`` (transformer shapes, FLOPs), ``memory`` (training and inference memory),
``mfu`` (peak and utilisation), ``scaling`` (multi-GPU / multi-node efficiency), ``training``,
``inference``, ``calibration`` (published runs and the estimator's error on each), ``moe``
(mixture-of-experts layout and all-to-all traffic), ``hardware`` (the estimate for hardware the
user names: ``gpulease estimate``). The package itself is callable, as the SDK's
``gpulease.estimate(task, gpus="H800:8", nodes=256)``.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulease.estimate.inference import estimate_inference
from gpulease.estimate.memory import min_training_gpus, training_memory_gb
from gpulease.estimate.mfu import utilisation
from gpulease.estimate.results import HoursRange, InferenceEstimate, TrainingEstimate
from gpulease.estimate.scaling import scaling_efficiency
from gpulease.estimate.shapes import TransformerShape, training_flops, transformer_shape
from gpulease.estimate.training import estimate_training
from gpulease.spec.models import Workload

if TYPE_CHECKING:
    from gpulease.catalog import Catalog
    from gpulease.estimate.calibration import CalibrationRow, calibration_report
    from gpulease.estimate.hardware import HardwareEstimate, estimate_hardware
    from gpulease.spec.models import Task

__all__ = [
    "CalibrationRow",
    "HardwareEstimate",
    "HoursRange",
    "InferenceEstimate",
    "TrainingEstimate",
    "TransformerShape",
    "calibration_report",
    "estimate_hardware",
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
    """Load the calibration table and the named-hardware entry point only when asked for:
    planning never needs them."""
    if name in {"CalibrationRow", "calibration_report"}:
        from gpulease.estimate import calibration

        return getattr(calibration, name)
    if name in {"HardwareEstimate", "estimate_hardware"}:
        from gpulease.estimate import hardware

        return getattr(hardware, name)
    raise AttributeError(f"module 'gpulease.estimate' has no attribute {name!r}")


class _CallablePackage(types.ModuleType):
    """Makes ``gpulease.estimate(task, gpus="H800:8", nodes=256)`` work: the SDK's name for
    :func:`~gpulease.estimate.hardware.estimate_hardware` is this package's own name."""

    def __call__(
        self,
        task_or_workload: Task | Workload | str | Path,
        gpus: str,
        nodes: int = 1,
        *,
        fabric: str | None = None,
        network_gbps: float | None = None,
        catalog: Catalog | None = None,
    ) -> HardwareEstimate:
        from gpulease.estimate.hardware import estimate_hardware

        return estimate_hardware(
            task_or_workload,
            gpus,
            nodes,
            fabric=fabric,
            network_gbps=network_gbps,
            catalog=catalog,
        )


sys.modules[__name__].__class__ = _CallablePackage
