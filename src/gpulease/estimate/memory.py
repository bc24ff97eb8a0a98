"""GPU memory: what training needs per GPU by sharding, the fewest GPUs that hold it, and the
weights and KV cache of inference.

Training, per GPU (bytes):

- model state, 16·N: 16-bit weights (2) and gradients (2), fp32 master weights (4) and Adam's two
  moments (4 + 4) — mixed-precision Adam as in ZeRO (Rajbhandari et al. 2020, §3.1); fp32
  training has the same 16 (4 + 4 + 8). DDP keeps it all on every GPU; FSDP / ZeRO-3 divide it by
  the GPU count and add a gather buffer of two layers' 16-bit weights (2 · 12h² · 2).
- activations of one micro-batch (b sequences of s tokens; b·s ≤ 8192 tokens, more of the global
  batch is gradient accumulation), after Korthikanti et al. 2022 ("Reducing Activation
  Recomputation in Large Transformer Models", eq. 1) with FlashAttention, which drops the
  5·a·s/h attention-matrix term: 34·s·b·h bytes per layer in 16-bit. Models of 1B parameters
  and up are assumed to checkpoint every layer: 2·s·b·h per layer kept plus one layer's 34·s·b·h
  recomputed. fp32/tf32 doubles it. Non-transformers: 1 byte per 250 training FLOPs per sample
  (ResNet-50: ~100 MB per image in 16-bit) × a micro-batch of ≤ 32 samples.
- 1.5 GB of CUDA context, NCCL buffers and workspaces.
- a mixture of experts holds the state of every expert: FSDP / ZeRO-3 divide all of it by the
  GPUs; DDP keeps the shared parameters whole and spreads the routed experts over the
  expert-parallel degree; the gather buffer holds two layers' shared parameters and local
  experts (:mod:`~gpulease.estimate.moe`). Activations follow the active shape.

A configuration fits when that is at most 90 % of the GPU's memory (allocator fragmentation).

Inference: weights N × bytes(precision) plus a KV cache of 2·L·kv_heads·head_dim·bytes per token
of context per sequence.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.moe import gathered_params_per_layer, is_moe, model_state_params
from gpulease.estimate.shapes import transformer_shape, uses_tokens
from gpulease.spec.models import Workload

STATE_BYTES_PER_PARAM = 16.0
CUDA_OVERHEAD_GB = 1.5
USABLE_FRACTION = 0.90
CHECKPOINT_FROM_PARAMS = 1e9
MICRO_BATCH_TOKENS = 8192
DEFAULT_SEQ_LEN = 2048
MICRO_BATCH_SAMPLES = 32
TRAINING_FLOPS_PER_ACTIVATION_BYTE = 250.0
MAX_GPUS = 4096
SHARDINGS = ("ddp", "fsdp", "zero3")
DTYPE_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
GB = 1e9


def usable_gb(spec: AcceleratorSpec) -> float:
    """Memory a job can count on: 90 % of the part's."""
    return spec.memory_gb * USABLE_FRACTION


def _micro_batch(global_batch: int | None, gpus: int, cap: int) -> int:
    if global_batch is None:
        return cap
    return max(1, min(math.ceil(global_batch / gpus), cap))


def activation_bytes(workload: Workload, gpus: int) -> float:
    """Activation memory of one micro-batch on one GPU (see the module docstring)."""
    params = workload.model.params
    wide = 2.0 if workload.precision in ("fp32", "tf32") else 1.0
    if workload.model.arch != "transformer" and not uses_tokens(workload):
        per_sample = (
            workload.flops_per_sample or 6.0 * params
        ) / TRAINING_FLOPS_PER_ACTIVATION_BYTE
        return wide * per_sample * _micro_batch(workload.global_batch, gpus, MICRO_BATCH_SAMPLES)
    shape = transformer_shape(workload.model)
    seq = workload.seq_len or DEFAULT_SEQ_LEN
    batch = _micro_batch(workload.global_batch, gpus, max(1, MICRO_BATCH_TOKENS // seq))
    layer = 34.0 * seq * batch * shape.hidden
    if params >= CHECKPOINT_FROM_PARAMS:
        return wide * (shape.layers * 2.0 * seq * batch * shape.hidden + layer)
    return wide * shape.layers * layer


def checkpointing_assumed(workload: Workload) -> bool:
    return workload.model.arch == "transformer" and workload.model.params >= CHECKPOINT_FROM_PARAMS


def training_memory_gb(workload: Workload, gpus: int, sharding: str) -> float:
    """Memory per GPU of training ``workload`` on ``gpus`` GPUs with ``sharding``."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {', '.join(SHARDINGS)}, got {sharding!r}")
    gpus = max(1, gpus)
    state = STATE_BYTES_PER_PARAM * model_state_params(workload, gpus, sharding)
    gather = 0.0
    if sharding != "ddp" and gpus > 1 and workload.model.arch == "transformer":
        shape = transformer_shape(workload.model)
        if is_moe(workload.model):
            layer = gathered_params_per_layer(workload, gpus, shape.layers)
        else:
            layer = 12.0 * shape.hidden * shape.hidden
        gather = 2 * layer * 2.0
    return (state + gather + activation_bytes(workload, gpus)) / GB + CUDA_OVERHEAD_GB


def _smallest(fits: Callable[[int], bool], limit: int) -> int | None:
    """The smallest g in 1..limit with fits(g), for fits monotone in g."""
    if not fits(limit):
        return None
    low, high = 1, 1
    while high < limit and not fits(high):
        low, high = high + 1, min(high * 2, limit)
    while low < high:  # fits(high); not fits(low - 1)
        mid = (low + high) // 2
        if fits(mid):
            high = mid
        else:
            low = mid + 1
    return high


def min_training_gpus(workload: Workload, spec: AcceleratorSpec) -> tuple[int, str] | None:
    """The fewest GPUs of ``spec`` whose memory holds training, and the sharding that needs.

    With ``workload.sharding`` unset: DDP on one GPU when it fits, else FSDP on the fewest GPUs.
    None when even :data:`MAX_GPUS` GPUs are not enough.
    """
    limit = usable_gb(spec)

    def fits(sharding: str) -> Callable[[int], bool]:
        return lambda gpus: training_memory_gb(workload, gpus, sharding) <= limit

    if workload.sharding is None:
        if fits("ddp")(1):
            return 1, "ddp"
        sharding = "fsdp"
    else:
        sharding = workload.sharding
    gpus = _smallest(fits(sharding), MAX_GPUS)
    return None if gpus is None else (gpus, sharding)


def dtype_bytes(precision: str) -> float:
    return DTYPE_BYTES.get(precision, 2.0)


def weights_gb(workload: Workload) -> float:
    """Inference weights: N × bytes per parameter at ``workload.precision``."""
    return workload.model.params * dtype_bytes(workload.precision) / GB


def kv_cache_gb_per_token(workload: Workload) -> float:
    """KV cache per token of context: 2 (K and V) · layers · kv_heads · head_dim · bytes (0 for
    models that are not transformers)."""
    if workload.model.arch != "transformer":
        return 0.0
    shape = transformer_shape(workload.model)
    return 2.0 * shape.layers * shape.kv_width * dtype_bytes(workload.precision) / GB
