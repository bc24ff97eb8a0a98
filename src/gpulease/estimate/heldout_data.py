"""Published mixture-of-experts runs held out of calibration: a test of the estimator.

Nothing here was used to fit a figure of :mod:`~gpulease.estimate.mfu` or
:mod:`~gpulease.estimate.scaling` (the MoE factor is fitted to DeepSeek-V2 and DeepSeek-V3 in
:mod:`~gpulease.estimate.calibration_data` and to nothing else), so the error on these rows is
how far the estimator can be trusted on a run it has not seen. Do not tune to them, and do not
move them into the calibration table. Each row's figures were read from the source named on it;
GPU counts, fabrics and the precision are assumptions where the row says so.

Not included, and why: Mixtral 8x7B, DBRX and the Qwen MoE models publish no GPU-hours;
Snowflake Arctic gives only a budget ("less than 3,000 GPU-weeks"); OLMoE-1B-7B gives its GPUs
but no total time.
"""

from __future__ import annotations

from gpulease.estimate.calibration_data import CalibrationRun

_LLAMA4 = (
    "Llama 4 model card, github.com/meta-llama/llama-models models/llama4/MODEL_CARD.md "
    "(Apr 2025); 48 layers × 5120, 1 routed expert per token per the released config; FP8 per "
    "Meta's Llama 4 blog (Apr 2025)"
)
_JETMOE = (
    "Shen et al., JetMoE, arXiv:2404.07413 (Apr 2024): 1.25T tokens, 30,000 H100 GPU-h, "
    "96 H100; 24 blocks × 2048, 8 experts, top-2"
)
_ASSUMED = "GPU count assumed"

# fmt: off
HELD_OUT: tuple[CalibrationRun, ...] = (
    CalibrationRun("Llama 4 Scout (MoE)", 109e9, "H100-80GB", 8192, 5.0e6, "5.0M GPU-h", _LLAMA4,
                   tokens=40e12, layers=48, hidden=5120, seq_len=8192, precision="fp8",
                   fabric="roce", network_gbps=3200.0, active_params=17e9, experts=16,
                   experts_per_token=1, note=_ASSUMED),
    CalibrationRun("Llama 4 Maverick (MoE)", 400e9, "H100-80GB", 8192, 2.38e6, "2.38M GPU-h",
                   _LLAMA4, tokens=22e12, layers=48, hidden=5120, seq_len=8192,
                   precision="fp8", fabric="roce", network_gbps=3200.0, active_params=17e9,
                   experts=128, experts_per_token=1, note=_ASSUMED),
    CalibrationRun("JetMoE-8B (MoE)", 8e9, "H100-80GB", 96, 30_000, "30,000 GPU-h", _JETMOE,
                   tokens=1.25e12, layers=24, hidden=2048, seq_len=4096, network_gbps=3200.0,
                   active_params=2.2e9, experts=8, experts_per_token=2),
)
# fmt: on
