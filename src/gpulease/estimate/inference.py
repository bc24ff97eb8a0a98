"""Serving: GPUs per replica (tensor parallel), replicas, and tokens per second per replica.

For each power-of-two tensor-parallel degree tp ≤ GPUs per node whose memory holds the weights
and the KV cache of at least one full-context sequence (tp × 90 % of memory − weights − 1.5 GB per
GPU), a replica runs continuous batching at the largest batch B the remaining KV memory allows
(at most 256 sequences, vLLM's default ``max_num_seqs``):

- prefill is compute-bound: (2·N·p + 2·L·h·p²) FLOPs per request of p prompt tokens at the
  training MFU of the part (:mod:`~gpulease.estimate.mfu`); N is the active parameter count of
  a mixture of experts, whose weights are all held and read;
- decode is memory-bandwidth-bound: each step reads the weights once and every sequence's KV
  cache, t = (weights + B × KV at mean context) / (tp × bandwidth × 0.6) — inference engines
  reach 50-70 % of HBM bandwidth — or the compute time of 2·N·B FLOPs, whichever is longer;
- tensor parallelism costs 10 % per doubling over NVLink, 25 % over PCIe (per-layer all-reduces).

A replica serves 1 / (prefill time + output tokens × step time / B) requests per second; the
degree with the most tokens per second per GPU wins (a smaller one within 5 %). Replicas =
ceil(requests/s × (prompt + output) / tokens per second per replica).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.memory import (
    CUDA_OVERHEAD_GB,
    GB,
    kv_cache_gb_per_token,
    usable_gb,
    weights_gb,
)
from gpulease.estimate.mfu import expected_mfu
from gpulease.estimate.moe import active_params
from gpulease.estimate.results import HoursRange, InferenceEstimate
from gpulease.estimate.shapes import transformer_shape
from gpulease.spec.models import Workload

DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256
DEFAULT_REQUESTS_PER_SECOND = 1.0
DEFAULT_HOURS = 1.0
MAX_BATCH = 256
DECODE_BANDWIDTH_SHARE = 0.6
TP_EFFICIENCY_NVLINK, TP_EFFICIENCY_PCIE = 0.90, 0.75
NVLINK_FROM_GBPS = 150.0
SMALLER_TP_PREFERENCE = 1.05


def _tp_degrees(gpus_per_node: int) -> list[int]:
    degrees, tp = [], 1
    while tp <= gpus_per_node:
        degrees.append(tp)
        tp *= 2
    return degrees


@dataclass(frozen=True, slots=True)
class _Load:
    prompt: int
    output: int
    context: int


def _replica(
    workload: Workload, spec: AcceleratorSpec, tp: int, load: _Load, flops_per_gpu: float
) -> tuple[float, int, float] | None:
    """(tokens per second, batch, memory per GPU GB) of one replica of ``tp`` GPUs, or None
    when the weights and one full-context sequence do not fit."""
    weights = weights_gb(workload)
    kv_token = kv_cache_gb_per_token(workload)
    kv_sequence = kv_token * load.context
    free = tp * (usable_gb(spec) - CUDA_OVERHEAD_GB) - weights
    if free <= 0 or free < kv_sequence:
        return None
    batch = MAX_BATCH if kv_sequence == 0 else min(MAX_BATCH, math.floor(free / kv_sequence))
    shape = transformer_shape(workload.model)
    nvlink = spec.intra_node_gbps >= NVLINK_FROM_GBPS
    tp_eff = (TP_EFFICIENCY_NVLINK if nvlink else TP_EFFICIENCY_PCIE) ** math.log2(tp)
    compute = tp * flops_per_gpu * tp_eff
    params = active_params(workload.model)  # FLOPs per token; the weights read are all
    prompt = load.prompt
    prefill = (2 * params * prompt + 2 * shape.layers * shape.hidden * prompt**2) / compute
    read = (weights + batch * kv_token * (prompt + load.output / 2)) * GB
    bandwidth = tp * spec.memory_bandwidth_gbps * GB * DECODE_BANDWIDTH_SHARE * tp_eff
    step = max(read / bandwidth, 2 * params * batch / compute)
    requests = 1.0 / (prefill + load.output * step / batch)
    memory = (weights + batch * kv_sequence) / tp + CUDA_OVERHEAD_GB
    return requests * (prompt + load.output), batch, memory


def estimate_inference(
    workload: Workload, spec: AcceleratorSpec, *, gpus_per_node: int
) -> InferenceEstimate | None:
    """Replicas and GPUs per replica to serve ``workload`` on ``spec``; None when the weights and
    one sequence's KV cache do not fit ``gpus_per_node`` GPUs (or the part has no figure for
    ``workload.precision`` nor a slower mode)."""
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be at least 1")
    peak = spec.peak_tflops(workload.precision)
    if peak <= 0:
        return None
    flops_per_gpu = peak * 1e12 * expected_mfu(spec, workload.precision, workload, peak)
    notes: list[str] = []
    prompt = workload.prompt_tokens or DEFAULT_PROMPT_TOKENS
    output = workload.output_tokens or DEFAULT_OUTPUT_TOKENS
    if workload.prompt_tokens is None or workload.output_tokens is None:
        notes.append(f"prompt/output tokens not given: assumed {prompt}/{output}")
    context = workload.context_len or prompt + output
    load = _Load(prompt, output, context)
    rps = workload.requests_per_second
    if rps is None:
        rps = DEFAULT_REQUESTS_PER_SECOND
        notes.append(f"requests_per_second not given: assumed {rps:g}")
    best: tuple[int, tuple[float, int, float]] | None = None
    for tp in _tp_degrees(gpus_per_node):
        replica = _replica(workload, spec, tp, load, flops_per_gpu)
        if replica is None:
            continue
        if best is None or replica[0] / tp > SMALLER_TP_PREFERENCE * best[1][0] / best[0]:
            best = (tp, replica)
    if best is None:
        return None
    tp, (tokens_per_second, batch, memory) = best
    replicas = max(1, math.ceil(rps * (prompt + output) / tokens_per_second))
    hours = workload.hours
    if hours is None:
        hours = DEFAULT_HOURS
        notes.append(f"hours not given: assumed {hours:g} h of serving")
    kv = kv_cache_gb_per_token(workload) * context
    notes.insert(
        0,
        f"weights {weights_gb(workload):.0f} GB + KV {kv:.2f} GB per {context}-token "
        f"sequence; tp={tp}, batch up to {batch}",
    )
    return InferenceEstimate(
        gpus_per_replica=tp,
        replicas=replicas,
        memory_per_gpu_gb=memory,
        tokens_per_second_per_replica=tokens_per_second,
        hours=HoursRange(hours, hours, hours),
        notes=tuple(notes),
    )
