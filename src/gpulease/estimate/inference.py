"""Serving: GPUs per replica (tensor parallel), replicas, throughput and latency per replica.

For each power-of-two tensor-parallel degree tp ≤ GPUs per node whose memory holds the weights
and the KV cache of at least one full-context sequence (tp × 90 % of memory − weights − 1.5 GB per
GPU), a replica runs continuous batching, at most B sequences at once: as many as the remaining
KV memory allows, at most 256 (vLLM's default ``max_num_seqs``):

- prefill is compute-bound: (2·N·p + 2·L·h·p²) FLOPs per request of p prompt tokens at
  :data:`PREFILL_MFU_RATIO` × the part's training MFU (:mod:`~gpulease.estimate.mfu`); N is the
  active parameter count of a mixture of experts, whose weights are all held and read;
- decode is memory-bandwidth-bound: each step reads the weights once and every sequence's KV
  cache, t(n) = (weights + n × KV at mean context) / (tp × bandwidth × share), the share being
  :data:`DECODE_BANDWIDTH_SHARE`, or the compute time of 2·N·n FLOPs, whichever is longer;
- tensor parallelism costs 10 % per doubling over NVLink, 25 % over PCIe (per-layer all-reduces).

Both constants are fitted to one published figure each and tested against others
(docs/estimate.md, "Serving latency"). At a full batch a replica serves B / (B · prefill +
output × t(B)) requests per second; replicas = ceil(requests/s × (prompt + output) / tokens per
second per replica), or more: as many as :func:`~gpulease.estimate.latency.replicas_for` needs
for the load to be served and the workload's latency targets met (``latency_p95``,
``ttft_p95``, ``tpot_p95``). Without targets the degree with the most tokens per second per GPU
wins (a smaller one within 5 %); with them, the degree needing the fewest GPUs in all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.latency import (
    MAX_REPLICAS,
    Latency,
    ReplicaModel,
    Targets,
    latency_at,
    replicas_for,
)
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
#: Prefill's share of peak, relative to the part's end-to-end training MFU: a forward pass with
#: no backward, optimizer, gradient traffic or input pipeline. Fitted to TensorRT-LLM v0.5's
#: first-token latency of LLaMA 7B, 2,048 prompt tokens, batch 1, on one A100 in fp16: 133 ms.
PREFILL_MFU_RATIO = 1.39
PREFILL_MFU_CAP = 0.85
#: Share of HBM bandwidth a decode step achieves. Fitted to NVIDIA NeMo's Llama-2-7B on one
#: A100 80GB SXM4, batch 1, 128 prompt / 20 output tokens: 234.0 ms a request.
DECODE_BANDWIDTH_SHARE = 0.56
TP_EFFICIENCY_NVLINK, TP_EFFICIENCY_PCIE = 0.90, 0.75
NVLINK_FROM_GBPS = 150.0
SMALLER_TP_PREFERENCE = 1.05


@dataclass(frozen=True, slots=True)
class _Load:
    prompt: int
    output: int
    context: int
    rps: float


@dataclass(frozen=True, slots=True)
class _Replica:
    tp: int
    model: ReplicaModel
    tokens_per_second: float
    memory_gb: float  # per GPU, at the full batch

    @property
    def batch(self) -> int:
        return self.model.max_batch


def _tp_degrees(gpus_per_node: int) -> list[int]:
    degrees, tp = [], 1
    while tp <= gpus_per_node:
        degrees.append(tp)
        tp *= 2
    return degrees


def _replica(
    workload: Workload, spec: AcceleratorSpec, tp: int, load: _Load, flops_per_gpu: float
) -> _Replica | None:
    """One replica of ``tp`` GPUs, or None when the weights and one full-context sequence do
    not fit."""
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
    bandwidth = tp * spec.memory_bandwidth_gbps * GB * DECODE_BANDWIDTH_SHARE * tp_eff
    model = ReplicaModel(
        prefill_s=prefill,
        step_base_s=weights * GB / bandwidth,
        step_per_seq_s=kv_token * (prompt + load.output / 2) * GB / bandwidth,
        step_compute_per_seq_s=2 * params / compute,
        max_batch=batch,
        output_tokens=load.output,
    )
    requests = batch / (batch * prefill + load.output * model.step_s(batch))
    memory = (weights + batch * kv_sequence) / tp + CUDA_OVERHEAD_GB
    return _Replica(tp, model, requests * (prompt + load.output), memory)


def _targets(workload: Workload) -> Targets:
    return Targets(workload.latency_p95_s, workload.ttft_p95_s, workload.tpot_p95_s)


def _sized(replica: _Replica, load: _Load, targets: Targets) -> tuple[int, Latency] | str:
    """Replicas of this degree for the load (throughput, then latency), or why none serve."""
    by_throughput = math.ceil(load.rps * (load.prompt + load.output) / replica.tokens_per_second)
    if by_throughput > MAX_REPLICAS:
        return f"needs more than {MAX_REPLICAS:,} replicas for {load.rps:g} requests/s"
    return replicas_for(replica.model, load.rps, targets, at_least=max(1, by_throughput))


def _choose(
    replicas: list[_Replica], load: _Load, targets: Targets
) -> tuple[_Replica, int, Latency | None, str | None]:
    """(degree, replicas, figures, miss): the best degree for the load and targets."""
    if not targets.any():
        best = replicas[0]
        for replica in replicas[1:]:
            per_gpu = replica.tokens_per_second / replica.tp
            if per_gpu > SMALLER_TP_PREFERENCE * best.tokens_per_second / best.tp:
                best = replica
        sized = _sized(best, load, targets)
        if isinstance(sized, str):  # not served by any replica count searched: by throughput
            count = math.ceil(load.rps * (load.prompt + load.output) / best.tokens_per_second)
            return best, max(1, count), None, None
        return best, sized[0], sized[1], None
    met: list[tuple[int, int, int, _Replica, Latency]] = []
    miss = ""
    for replica in replicas:
        sized = _sized(replica, load, targets)
        if isinstance(sized, str):
            miss = f"tp{replica.tp}: {sized}"  # the largest degree's reason is kept
            continue
        met.append((sized[0] * replica.tp, replica.tp, sized[0], replica, sized[1]))
    if not met:
        fastest = replicas[-1]
        count = math.ceil(load.rps * (load.prompt + load.output) / fastest.tokens_per_second)
        return fastest, max(1, count), latency_at(fastest.model, 0.0), miss
    _, _, count, replica, figures = min(met, key=lambda m: (m[0], m[1]))
    return replica, count, figures, None


def estimate_inference(
    workload: Workload, spec: AcceleratorSpec, *, gpus_per_node: int
) -> InferenceEstimate | None:
    """Replicas and GPUs per replica to serve ``workload`` on ``spec``; None when the weights and
    one sequence's KV cache do not fit ``gpus_per_node`` GPUs (or the part has no figure for
    ``workload.precision`` nor a slower mode). An estimate whose ``target_miss`` is set
    cannot meet the workload's latency targets at any replica count."""
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be at least 1")
    peak = spec.peak_tflops(workload.precision)
    if peak <= 0:
        return None
    mfu = expected_mfu(spec, workload.precision, workload, peak)
    flops_per_gpu = peak * 1e12 * min(PREFILL_MFU_CAP, PREFILL_MFU_RATIO * mfu)
    notes: list[str] = []
    prompt = workload.prompt_tokens or DEFAULT_PROMPT_TOKENS
    output = workload.output_tokens or DEFAULT_OUTPUT_TOKENS
    if workload.prompt_tokens is None or workload.output_tokens is None:
        notes.append(f"prompt/output tokens not given: assumed {prompt}/{output}")
    rps = workload.requests_per_second
    if rps is None:
        rps = DEFAULT_REQUESTS_PER_SECOND
        notes.append(f"requests_per_second not given: assumed {rps:g}")
    load = _Load(prompt, output, workload.context_len or prompt + output, rps)
    fitting = [
        replica
        for tp in _tp_degrees(gpus_per_node)
        if (replica := _replica(workload, spec, tp, load, flops_per_gpu)) is not None
    ]
    if not fitting:
        return None
    best, replicas, figures, miss = _choose(fitting, load, _targets(workload))
    hours = workload.hours
    if hours is None:
        hours = DEFAULT_HOURS
        notes.append(f"hours not given: assumed {hours:g} h of serving")
    kv = kv_cache_gb_per_token(workload) * load.context
    notes.insert(
        0,
        f"weights {weights_gb(workload):.0f} GB + KV {kv:.2f} GB per {load.context}-token "
        f"sequence; tp={best.tp}, batch up to {best.batch}",
    )
    if figures is not None and miss is None:
        notes.insert(1, f"{figures.describe()} at {figures.rate:.3g} requests/s per replica")
    return InferenceEstimate(
        gpus_per_replica=best.tp,
        replicas=replicas,
        memory_per_gpu_gb=best.memory_gb,
        tokens_per_second_per_replica=best.tokens_per_second,
        hours=HoursRange(hours, hours, hours),
        notes=tuple(notes),
        latency=figures,
        target_miss=miss,
        requests_per_second=rps,
        output_tokens=output,
    )
