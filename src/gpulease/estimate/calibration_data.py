"""Published training runs with their GPU-hours (or wall time × GPUs), as data.

The GPU-hours (or GPUs × days), token counts and hardware of every row were checked against the
source named on it (model cards, papers, vendor READMEs; the date is the publication's). ``gpus``
is as published unless ``note`` says "GPU count assumed", and fabrics are assumptions too: both
only move the scaling-efficiency term, by a few percent. Parts carry dense datasheet figures
(NVIDIA A100/H100/V100); the estimator sees nothing else of the hardware.

The mixture-of-experts rows are DeepSeek-V2 and DeepSeek-V3 only (they fit the MoE factor of
:mod:`~gpulease.estimate.mfu`); other published MoE runs are held out of calibration, in
:mod:`~gpulease.estimate.heldout_data`, so that they stay a fair test of it.

Not included, and why: OPT-175B (the paper gives 147 TFLOP/s per GPU, not GPU-hours: 47 % MFU,
inside our A100 band); BloombergGPT (its "1.3M GPU-hours" is the compute budget allotted, not the
final run's use: 512 A100s × ~53 days ≈ 0.65M); StarCoder (GPU-hours not published).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulease.catalog.types import AcceleratorSpec


def _nvidia(
    *,
    part: str,
    name: str,
    generation: str,
    memory_gb: float,
    bandwidth: float,
    tflops: dict[str, float],
    nvlink: float,
) -> AcceleratorSpec:
    return AcceleratorSpec(
        part=part,
        name=name,
        vendor="NVIDIA",
        architecture=generation.title(),
        generation=generation,
        form_factor="SXM",
        memory_gb=memory_gb,
        memory_bandwidth_gbps=bandwidth,
        tflops=tflops,
        interconnect="NVLink",
        intra_node_gbps=nvlink,
        tdp_w=None,
        release_year=0,
        source="NVIDIA datasheet (dense figures)",
    )


_AMPERE = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
_HOPPER = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
PARTS: dict[str, AcceleratorSpec] = {
    "V100-16GB": _nvidia(part="V100-SXM2-16GB", name="V100", generation="volta", memory_gb=16,
                         bandwidth=900, tflops={"fp32": 15.7, "fp16": 125.0}, nvlink=300),
    "A100-40GB": _nvidia(part="A100-SXM4-40GB", name="A100", generation="ampere", memory_gb=40,
                         bandwidth=1555, tflops=_AMPERE, nvlink=600),
    "A100-80GB": _nvidia(part="A100-SXM4-80GB", name="A100-80GB", generation="ampere",
                         memory_gb=80, bandwidth=2039, tflops=_AMPERE, nvlink=600),
    "H100-80GB": _nvidia(part="H100-SXM5-80GB", name="H100", generation="hopper", memory_gb=80,
                         bandwidth=3350, tflops=_HOPPER, nvlink=900),
    # H800: H100 SXM's tensor rates with NVLink cut to 400 GB/s (DeepSeek-V3 report §3.1)
    "H800": _nvidia(part="H800-SXM", name="H800", generation="hopper", memory_gb=80,
                    bandwidth=3350, tflops=_HOPPER, nvlink=400),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    """One published run. Work is ``tokens`` (transformers) or ``samples`` × ``flops_per_sample``
    (everything else); both already include epochs."""

    run: str
    params: float
    part: str
    gpus: int
    published_gpu_hours: float
    published: str
    source: str
    tokens: float | None = None
    layers: int | None = None
    hidden: int | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    samples: float | None = None
    flops_per_sample: float | None = None
    arch: str = "transformer"
    precision: str = "bf16"
    gpus_per_node: int = 8
    fabric: str = "infiniband"
    network_gbps: float = 1600.0
    note: str = ""
    active_params: float | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    expert_parallel: int | None = None


_LLAMA1 = "Touvron et al., LLaMA, arXiv:2302.13971 (Feb 2023), Table 15"
_LLAMA2 = "Llama 2 model card, github.com/facebookresearch/llama MODEL_CARD.md (Jul 2023)"
_LLAMA3 = "Llama 3 model card, github.com/meta-llama/llama3 MODEL_CARD.md (Apr 2024)"
_LLAMA31 = "Llama 3.1 model card, huggingface.co/meta-llama/Llama-3.1-8B (Jul 2024)"
_SMOL = (
    "SmolLM2 team answer, huggingface.co/HuggingFaceTB/SmolLM2-1.7B-Instruct/discussions/20 "
    "(2025, approximate)"
)
_RN50 = (
    "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "
    "pytorch-21.03 container (2021)"
)
_DSV2 = (
    "DeepSeek-AI, DeepSeek-V2, arXiv:2405.04434 (May 2024): 172.8K H800 GPU-h per trillion "
    "tokens, 8.1T tokens, 8-way expert parallelism"
)
_DSV3 = (
    "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437 (Dec 2024), Table 1: pre-training "
    "on 2,048 H800, FP8, 64-way expert parallelism"
)
_IMAGENET_90 = 1_281_167 * 90
_RN50_FLOPS = 24.6e9  # 4.1 GMAC forward × 2 FLOP/MAC × 3 (forward + backward)
_ASSUMED = "GPU count assumed"

# fmt: off
RUNS: tuple[CalibrationRun, ...] = (
    CalibrationRun("LLaMA 7B", 6.7e9, "A100-80GB", 2048, 82_432, "82,432 GPU-h", _LLAMA1,
                   tokens=1.0e12, layers=32, hidden=4096, seq_len=2048, global_batch=2048,
                   note=_ASSUMED),
    CalibrationRun("LLaMA 13B", 13.0e9, "A100-80GB", 2048, 135_168, "135,168 GPU-h", _LLAMA1,
                   tokens=1.0e12, layers=40, hidden=5120, seq_len=2048, global_batch=2048,
                   note=_ASSUMED),
    CalibrationRun("LLaMA 33B", 32.5e9, "A100-80GB", 2048, 530_432, "530,432 GPU-h", _LLAMA1,
                   tokens=1.4e12, layers=60, hidden=6656, seq_len=2048, global_batch=2048,
                   note=_ASSUMED),
    CalibrationRun("LLaMA 65B", 65.2e9, "A100-80GB", 2048, 1_022_362, "1,022,362 GPU-h", _LLAMA1,
                   tokens=1.4e12, layers=80, hidden=8192, seq_len=2048, global_batch=2048),
    CalibrationRun("Llama 2 7B", 6.74e9, "A100-80GB", 2048, 184_320, "184,320 GPU-h", _LLAMA2,
                   tokens=2.0e12, layers=32, hidden=4096, seq_len=4096, global_batch=1024,
                   note=_ASSUMED),
    CalibrationRun("Llama 2 13B", 13.0e9, "A100-80GB", 2048, 368_640, "368,640 GPU-h", _LLAMA2,
                   tokens=2.0e12, layers=40, hidden=5120, seq_len=4096, global_batch=1024,
                   note=_ASSUMED),
    CalibrationRun("Llama 2 70B", 69.0e9, "A100-80GB", 2048, 1_720_320, "1,720,320 GPU-h",
                   _LLAMA2, tokens=2.0e12, layers=80, hidden=8192, seq_len=4096,
                   global_batch=1024, note=_ASSUMED),
    CalibrationRun("BLOOM 176B", 176e9, "A100-80GB", 384, 1_082_990, "1,082,990 GPU-h",
                   "Luccioni et al., arXiv:2211.02001 (Nov 2022), Table 1; 366B tokens per "
                   "hf.co/bigscience/bloom", tokens=366e9, layers=70, hidden=14336,
                   seq_len=2048, global_batch=2048, network_gbps=400.0),
    CalibrationRun("MPT-7B", 6.7e9, "A100-40GB", 440, 440 * 9.5 * 24, "440 GPUs × 9.5 days",
                   "huggingface.co/mosaicml/mpt-7b model card; databricks.com/blog/mpt-7b "
                   "(May 2023)", tokens=1.0e12, layers=32, hidden=4096, seq_len=2048),
    CalibrationRun("MPT-1.3B", 1.3e9, "A100-40GB", 440, 440 * 12, "440 GPUs × ~half a day",
                   "huggingface.co/mosaicml/mpt-1b-redpajama-200b model card (Apr 2023)",
                   tokens=200e9, layers=24, hidden=2048, seq_len=2048),
    CalibrationRun("Pythia 1B", 1.01e9, "A100-40GB", 64, 4_830, "4,830 GPU-h",
                   "Biderman et al., Pythia, arXiv:2304.01373 (Apr 2023), as quoted in "
                   "github.com/jzhang38/TinyLlama README", tokens=300e9, layers=16, hidden=2048,
                   seq_len=2048, global_batch=1024, fabric="efa", network_gbps=400.0,
                   note=_ASSUMED),
    CalibrationRun("TinyLlama 1.1B (per 300B tokens)", 1.1e9, "A100-40GB", 16, 3_456,
                   "3,456 GPU-h", "github.com/jzhang38/TinyLlama README (Sep 2023)",
                   tokens=300e9, layers=22, hidden=2048, seq_len=2048, global_batch=1024),
    CalibrationRun("Falcon-40B", 40e9, "A100-40GB", 384, 384 * 60 * 24, "384 GPUs × ~2 months",
                   "huggingface.co/tiiuae/falcon-40b model card (May 2023)", tokens=1.0e12,
                   layers=60, hidden=8192, seq_len=2048, fabric="efa", network_gbps=400.0),
    CalibrationRun("GPT-2 124M, nanoGPT", 124e6, "A100-40GB", 8, 8 * 4 * 24, "8 GPUs × ~4 days",
                   "github.com/karpathy/nanoGPT README and config/train_gpt2.py (2023)",
                   tokens=600_000 * 491_520, layers=12, hidden=768, seq_len=1024,
                   global_batch=480),
    CalibrationRun("GPT-2 124M, llm.c", 124e6, "A100-80GB", 8, 8 * 1.5, "8 GPUs × ~90 min",
                   "github.com/karpathy/llm.c discussion #481 (May 2024)", tokens=10e9,
                   layers=12, hidden=768, seq_len=1024, global_batch=512),
    CalibrationRun("Phi-2", 2.78e9, "A100-80GB", 96, 96 * 14 * 24, "96 GPUs × 14 days",
                   "huggingface.co/microsoft/phi-2 model card (Dec 2023)", tokens=1.4e12,
                   layers=32, hidden=2560, seq_len=2048),
    CalibrationRun("Llama 3 8B", 8.03e9, "H100-80GB", 4096, 1.3e6, "1.3M GPU-h", _LLAMA3,
                   tokens=15e12, layers=32, hidden=4096, seq_len=8192, fabric="roce",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("Llama 3 70B", 70.6e9, "H100-80GB", 8192, 6.4e6, "6.4M GPU-h", _LLAMA3,
                   tokens=15e12, layers=80, hidden=8192, seq_len=8192, fabric="roce",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("Llama 3.1 8B", 8.03e9, "H100-80GB", 4096, 1.46e6, "1.46M GPU-h", _LLAMA31,
                   tokens=15e12, layers=32, hidden=4096, seq_len=8192, fabric="roce",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("Llama 3.1 70B", 70.6e9, "H100-80GB", 8192, 7.0e6, "7.0M GPU-h", _LLAMA31,
                   tokens=15e12, layers=80, hidden=8192, seq_len=8192, fabric="roce",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("Llama 3.1 405B", 405e9, "H100-80GB", 16384, 30.84e6, "30.84M GPU-h",
                   _LLAMA31 + "; 15.6T tokens, 16M-token batches per arXiv:2407.21783",
                   tokens=15.6e12, layers=126, hidden=16384, seq_len=8192, global_batch=2048,
                   fabric="roce", network_gbps=3200.0),
    CalibrationRun("Phi-3-mini 3.8B", 3.8e9, "H100-80GB", 512, 512 * 7 * 24, "512 GPUs × 7 days",
                   "huggingface.co/microsoft/Phi-3-mini-4k-instruct model card (Apr 2024)",
                   tokens=3.3e12, layers=32, hidden=3072, seq_len=4096, network_gbps=3200.0),
    CalibrationRun("Phi-3-medium 14B", 14e9, "H100-80GB", 512, 512 * 42 * 24,
                   "512 GPUs × 42 days",
                   "huggingface.co/microsoft/Phi-3-medium-4k-instruct model card (May 2024)",
                   tokens=4.8e12, layers=40, hidden=5120, seq_len=4096, network_gbps=3200.0),
    CalibrationRun("SmolLM2 1.7B", 1.71e9, "H100-80GB", 256, 140_000, "~140k GPU-h", _SMOL,
                   tokens=11e12, layers=24, hidden=2048, seq_len=2048, fabric="efa",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("SmolLM2 360M", 362e6, "H100-80GB", 256, 20_000, "~20k GPU-h", _SMOL,
                   tokens=4e12, layers=32, hidden=960, seq_len=2048, fabric="efa",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("SmolLM2 135M", 135e6, "H100-80GB", 256, 5_000, "~5k GPU-h", _SMOL,
                   tokens=2e12, layers=30, hidden=576, seq_len=2048, fabric="efa",
                   network_gbps=3200.0, note=_ASSUMED),
    CalibrationRun("MLPerf v3.0 GPT-3 175B (fp8)", 175e9, "H100-80GB", 3584, 3584 * 10.94 / 60,
                   "3,584 GPUs × 10.94 min",
                   "MLPerf Training v3.0, CoreWeave/NVIDIA (Jun 2023); ≈0.4 % of GPT-3's 300B "
                   "tokens per EE Times (Jun 26 2023)", tokens=1.2e9, layers=96, hidden=12288,
                   seq_len=2048, precision="fp8", network_gbps=3200.0),
    CalibrationRun("DeepSeek-V2 (MoE)", 236e9, "H800", 1024, 172.8e3 * 8.1,
                   "172.8K GPU-h/T × 8.1T", _DSV2, tokens=8.1e12, layers=60, hidden=5120,
                   seq_len=4096, global_batch=9216, fabric="infiniband", network_gbps=3200.0,
                   active_params=21e9, experts=160, experts_per_token=6, expert_parallel=8,
                   note=_ASSUMED),
    CalibrationRun("DeepSeek-V3 (MoE, fp8)", 671e9, "H800", 2048, 2.664e6, "2.664M GPU-h",
                   _DSV3, tokens=14.8e12, layers=61, hidden=7168, seq_len=4096,
                   global_batch=15360, precision="fp8", fabric="infiniband",
                   network_gbps=3200.0, active_params=37e9, experts=256, experts_per_token=8,
                   expert_parallel=64),
    CalibrationRun("ResNet-50 90 ep, AMP", 25.6e6, "A100-80GB", 8, 8 * 3, "8 GPUs × ~3 h", _RN50,
                   samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="fp16", global_batch=2048),
    CalibrationRun("ResNet-50 90 ep, TF32", 25.6e6, "A100-80GB", 8, 8 * 5, "8 GPUs × ~5 h", _RN50,
                   samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="tf32", global_batch=2048),
    CalibrationRun("ResNet-50 90 ep, AMP, 1 GPU", 25.6e6, "A100-80GB", 1, 14, "1 GPU × ~14 h",
                   _RN50, samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="fp16", global_batch=256, gpus_per_node=1),
    CalibrationRun("ResNet-50 90 ep, AMP", 25.6e6, "V100-16GB", 8, 8 * 5, "8 GPUs × ~5 h", _RN50,
                   samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="fp16", global_batch=2048),
    CalibrationRun("ResNet-50 90 ep, FP32", 25.6e6, "V100-16GB", 8, 8 * 12, "8 GPUs × ~12 h",
                   _RN50, samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="fp32", global_batch=2048),
    CalibrationRun("ResNet-50 90 ep, AMP, 1 GPU", 25.6e6, "V100-16GB", 1, 29, "1 GPU × ~29 h",
                   _RN50, samples=_IMAGENET_90, flops_per_sample=_RN50_FLOPS, arch="cnn",
                   precision="fp16", global_batch=256, gpus_per_node=1),
)
# fmt: on
