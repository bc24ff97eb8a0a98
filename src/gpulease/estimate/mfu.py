"""The model FLOPs utilisation (MFU) to expect of a part, by generation, model size, architecture,
form factor and precision.

MFU here is *end-to-end*: useful model FLOPs over the whole run divided by GPUs × dense peak × wall
time, so it already holds what published GPU-hours hold: data loading, evaluation, checkpointing,
restarts after failures, pipeline bubbles and tensor-parallel traffic. Only data-parallel gradient
traffic is modelled separately (:mod:`gpulease.estimate.scaling`). The figures are fitted to
published runs (:mod:`gpulease.estimate.calibration`, docs/estimate.md).

expected MFU = base(generation) × size(N, generation) × arch × form factor × precision, capped to
[0.02, 0.60], where

- base: what a large dense transformer reaches in 16-bit on that generation (A100 0.50, H100
  0.38: Hopper's much higher peak is harder to feed, as Llama 3's published hours show);
- size = 1 / (1 + (N½ / N)^0.6): small models run small matrices and lose utilisation, more so on
  faster parts (N½, where half the base is lost: 3M parameters on Ampere, 300M on Hopper);
- arch: CNNs 0.40 (convolutions and the input pipeline keep ResNet-50 near 15-20 % of tensor
  peak), other models 0.6, transformers 1;
- mixture of experts: the size term takes the active parameters, and a factor (fitted to
  DeepSeek-V2 and DeepSeek-V3, and to nothing else) for the small expert GEMMs, routing,
  permutation and load imbalance; the all-to-all traffic itself is in the scaling term;
- form factor: PCIe and consumer boards 0.85 (lower clocks and power limits);
- precision: fp8 0.70 (only the matmuls speed up), tf32 0.85, plain fp32 on vector units 2.8
  (its peak is 8-16× smaller and simple kernels reach more of it); a precision the part lacks
  is timed at the slower mode :meth:`AcceleratorSpec.peak_tflops` falls back to.

The low / high band is ×0.6 / ×1.5 of expected, the spread seen between the calibration runs.
"""

from __future__ import annotations

import math

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.moe import active_params, is_moe
from gpulease.spec.models import Workload

# generation → (base MFU of a large dense 16-bit transformer, N½ in parameters)
GENERATIONS: dict[str, tuple[float, float]] = {
    "kepler": (0.30, 3e6),
    "maxwell": (0.30, 3e6),
    "pascal": (0.35, 3e6),
    "volta": (0.44, 3e6),
    "turing": (0.35, 3e7),
    "ampere": (0.50, 3e6),
    "ada": (0.40, 1e8),
    "hopper": (0.38, 3e8),
    "blackwell": (0.33, 1e9),
    "cdna2": (0.25, 1e8),
    "cdna3": (0.24, 3e8),
    "gaudi2": (0.38, 1e8),
    "gaudi3": (0.34, 3e8),
}
DEFAULT_GENERATION = (0.30, 3e8)
SIZE_EXPONENT = 0.6
ARCH_FACTOR = {"transformer": 1.0, "cnn": 0.40, "other": 0.6}
PCIE_FACTOR = 0.85
MOE_FACTOR = 0.83
FP8_FACTOR = 0.70
TF32_FACTOR = 0.85
FP32_VECTOR_FACTOR = 2.8
MFU_FLOOR, MFU_CEILING = 0.02, 0.60
LOW_FACTOR, HIGH_FACTOR, HIGH_CEILING = 0.6, 1.5, 0.85


def on_vector_units(spec: AcceleratorSpec, peak: float) -> bool:
    """True when ``peak`` is the part's plain fp32 rate: fp32 itself, or a mode it lacks (bf16 on
    Volta/Turing) that falls back to it."""
    fp32 = spec.tflops.get("fp32", 0.0)
    return fp32 > 0 and peak <= fp32 * 1.001


def _precision_factor(spec: AcceleratorSpec, precision: str, peak: float) -> float:
    if on_vector_units(spec, peak):
        return FP32_VECTOR_FACTOR
    if precision == "fp8" and spec.tflops.get("fp8"):
        return FP8_FACTOR
    if precision == "tf32" and spec.tflops.get("tf32"):
        return TF32_FACTOR
    return 1.0


def size_factor(params: float, generation: str) -> float:
    """1 / (1 + (N½ / N)^0.6): the share of base MFU a model of ``params`` keeps."""
    n_half = GENERATIONS.get(generation.lower(), DEFAULT_GENERATION)[1]
    return 1.0 / (1.0 + math.pow(n_half / max(params, 1.0), SIZE_EXPONENT))


def expected_mfu(spec: AcceleratorSpec, precision: str, workload: Workload, peak: float) -> float:
    """The expected end-to-end MFU, given the dense ``peak`` already resolved for ``precision``."""
    generation = spec.generation.lower()
    base = GENERATIONS.get(generation, DEFAULT_GENERATION)[0]
    arch = workload.model.arch
    mfu = base * ARCH_FACTOR.get(arch, ARCH_FACTOR["other"])
    if arch == "transformer":
        mfu *= size_factor(active_params(workload.model), generation)
        if is_moe(workload.model):
            mfu *= MOE_FACTOR
    if "pcie" in spec.form_factor.lower() or "consumer" in spec.form_factor.lower():
        mfu *= PCIE_FACTOR
    mfu *= _precision_factor(spec, precision, peak)
    return min(max(mfu, MFU_FLOOR), MFU_CEILING)


def mfu_band(expected: float) -> tuple[float, float, float]:
    """(low, expected, high) around an expected MFU."""
    return expected * LOW_FACTOR, expected, min(expected * HIGH_FACTOR, HIGH_CEILING)


def utilisation(
    spec: AcceleratorSpec, precision: str, workload: Workload
) -> tuple[float, float, float]:
    """(low, expected, high) end-to-end MFU of ``workload`` on ``spec`` at ``precision``
    (all 0 when the part has no figure for ``precision`` or a slower mode)."""
    peak = spec.peak_tflops(precision)
    if peak <= 0:
        return 0.0, 0.0, 0.0
    return mfu_band(expected_mfu(spec, precision, workload, peak))
