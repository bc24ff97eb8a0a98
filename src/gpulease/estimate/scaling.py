"""Multi-GPU and multi-node scaling efficiency from data-parallel gradient traffic per step.

Per optimizer step, compute takes t_c = FLOPs per step / (GPUs × peak × MFU), with a step of
``global_batch × seq_len`` tokens (default max(1M, 8192 × GPUs) tokens) or ``global_batch``
samples (default 256 per GPU). Gradient traffic takes t_x (ring all-reduce moves 2·(n−1)/n of the
buffer through each link; Patarasuk & Yuan 2009):

- inside a node, over NVLink/PCIe at 40 % of the quoted per-GPU figure (vendors quote both
  directions; NCCL reaches ~230 GB/s on A100 NVLink "600 GB/s", ~20 GB/s on PCIe 4.0):
  2·(g−1)/g × gradient bytes, ×1.5 for FSDP/ZeRO-3 (two all-gathers and a reduce-scatter);
- between nodes, over the node's NICs (``network_gbps`` per node) at an achievable share by fabric
  (InfiniBand 0.85, RoCE 0.75, EFA 0.70, TCP ethernet 0.40): a hierarchical all-reduce moves
  2·(M−1)/M × gradient bytes per node. FSDP is taken as hybrid sharding (shard inside a node,
  replicate across nodes, PyTorch HYBRID_SHARD); ZeRO-3 shards across every GPU, ×1.5;
- a model whose 16-byte/param state fills more than half of a node is taken as split across k
  nodes by tensor/pipeline parallelism (Megatron-LM; Narayanan et al. 2021): each node then only
  all-reduces its 1/k slice with the other replicas (pipeline bubbles are part of MFU);
- a mixture of experts all-reduces the gradients of its shared parameters and of the routed
  experts on the node, and adds the expert-parallel all-to-all of every token, over NVLink /
  PCIe inside a node and the network between nodes (:mod:`~gpulease.estimate.moe`).

Traffic overlaps the backward pass: exposed = max(0.1·t_x, t_x − 0.8·t_c), and
efficiency = t_c / (t_c + exposed) × 0.95 when more than one GPU (synchronisation, stragglers,
input pipeline: NVIDIA's ResNet-50 scales 7.7× on 8 GPUs in TF32, 6.7× in AMP) ×
1 / (1 + 0.01·log2 nodes). The low / high band varies the overlap (0.5 … 1.0).
"""

from __future__ import annotations

import math

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.memory import (
    DEFAULT_SEQ_LEN,
    GB,
    STATE_BYTES_PER_PARAM,
    training_memory_gb,
    usable_gb,
)
from gpulease.estimate.mfu import expected_mfu
from gpulease.estimate.moe import (
    active_params,
    all_to_all_bytes_per_token,
    all_to_all_seconds,
    expert_layout,
    expert_nodes,
)
from gpulease.estimate.shapes import training_flops_per_token, transformer_shape, uses_tokens
from gpulease.spec.models import Workload

FABRIC_EFFICIENCY = {"infiniband": 0.85, "ib": 0.85, "roce": 0.75, "efa": 0.70, "ethernet": 0.40}
DEFAULT_FABRIC_EFFICIENCY = 0.5
INTRA_NODE_SHARE = 0.4
MIN_INTRA_NODE_GBPS = 16.0
OVERLAP, OVERLAP_LOW, OVERLAP_HIGH = 0.8, 0.5, 1.0
MIN_EXPOSED = 0.1
MULTI_GPU_SYNC = 0.95
NODE_SYNC_PER_DOUBLING = 0.01
DEFAULT_TOKENS_PER_STEP = 2**20
DEFAULT_TOKENS_PER_GPU = 8192
DEFAULT_SAMPLES_PER_GPU = 256
REPLICA_NODE_SHARE = 0.5


def step_tokens(workload: Workload, gpus: int) -> float:
    """Tokens per optimizer step of a token workload: global_batch × seq_len, else the default."""
    if workload.global_batch is not None:
        return float(workload.global_batch * (workload.seq_len or DEFAULT_SEQ_LEN))
    return float(max(DEFAULT_TOKENS_PER_STEP, DEFAULT_TOKENS_PER_GPU * gpus))


def step_compute_seconds(workload: Workload, gpus: int, peak_tflops: float, mfu: float) -> float:
    """Compute time of one optimizer step on ``gpus`` GPUs."""
    if uses_tokens(workload):
        flops = training_flops_per_token(workload) * step_tokens(workload, gpus)
    else:
        samples = workload.global_batch or DEFAULT_SAMPLES_PER_GPU * gpus
        flops = (workload.flops_per_sample or 6.0 * active_params(workload.model)) * samples
    return flops / (gpus * peak_tflops * 1e12 * mfu)


def nodes_per_replica(workload: Workload, spec: AcceleratorSpec, gpus_per_node: int) -> int:
    """Nodes one model replica spans: 1 unless the training state fills > half a node."""
    node_bytes = REPLICA_NODE_SHARE * gpus_per_node * spec.memory_gb * GB
    return max(1, math.ceil(STATE_BYTES_PER_PARAM * workload.model.params / node_bytes))


def step_traffic_seconds(
    workload: Workload,
    spec: AcceleratorSpec,
    sharding: str,
    *,
    gpus_per_node: int,
    num_nodes: int,
    fabric: str,
    network_gbps: float,
) -> float:
    """Seconds of data-parallel gradient traffic, plus a mixture of experts' all-to-all
    traffic, per step if nothing overlapped them."""
    wide = workload.precision in ("fp32", "tf32")
    grad = _gradient_params(workload, gpus_per_node, num_nodes) * (4.0 if wide else 2.0)
    inter_bw = _network_bytes_per_s(fabric, network_gbps)
    intra_bw = _intra_node_bytes_per_s(spec)
    seconds = expert_traffic_seconds(
        workload,
        spec,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        fabric=fabric,
        network_gbps=network_gbps,
    )
    span = min(num_nodes, nodes_per_replica(workload, spec, gpus_per_node))
    if span > 1:
        replicas = num_nodes // span
        if replicas > 1:
            seconds += 2 * (replicas - 1) / replicas * grad / span / inter_bw
        return seconds
    if gpus_per_node > 1:
        factor = 1.0 if sharding == "ddp" else 1.5
        seconds += factor * 2 * (gpus_per_node - 1) / gpus_per_node * grad / intra_bw
    if num_nodes > 1:
        factor = 1.5 if sharding == "zero3" else 1.0
        seconds += factor * 2 * (num_nodes - 1) / num_nodes * grad / inter_bw
    return seconds


def _gradient_params(workload: Workload, gpus_per_node: int, num_nodes: int) -> float:
    """Parameters whose gradients one node all-reduces with the other nodes: all of them, less
    the routed experts that live on other nodes of its expert-parallel group."""
    layout = expert_layout(workload.model)
    if layout is None:
        return workload.model.params
    return layout.shared_params + layout.expert_params / expert_nodes(
        workload, gpus_per_node, num_nodes
    )


def _network_bytes_per_s(fabric: str, network_gbps: float) -> float:
    """What a node's NICs carry, bytes/s, at the fabric's achievable share."""
    share = FABRIC_EFFICIENCY.get(fabric.lower(), DEFAULT_FABRIC_EFFICIENCY)
    return max(network_gbps, 1.0) * GB / 8 * share


def _intra_node_bytes_per_s(spec: AcceleratorSpec) -> float:
    return max(spec.intra_node_gbps, MIN_INTRA_NODE_GBPS) * GB * INTRA_NODE_SHARE


def expert_traffic_seconds(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    num_nodes: int,
    fabric: str,
    network_gbps: float,
) -> float:
    """Seconds per step of a mixture of experts' all-to-all traffic on one GPU, before any
    overlap (0 for a dense model)."""
    if not uses_tokens(workload) or workload.model.arch != "transformer":
        return 0.0
    gpus = gpus_per_node * num_nodes
    shape = transformer_shape(workload.model)
    return all_to_all_seconds(
        workload,
        bytes_per_token=all_to_all_bytes_per_token(workload, shape.layers, shape.hidden),
        tokens_per_gpu=step_tokens(workload, gpus) / gpus,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        intra_node_bytes_per_s=_intra_node_bytes_per_s(spec),
        node_network_bytes_per_s=_network_bytes_per_s(fabric, network_gbps),
    )


def efficiency_band(
    compute_s: float, traffic_s: float, gpus: int, num_nodes: int
) -> tuple[float, float, float]:
    """(low, expected, high) scaling efficiency for a step's compute and traffic seconds."""
    sync = 1.0 if gpus <= 1 else MULTI_GPU_SYNC
    sync /= 1.0 + NODE_SYNC_PER_DOUBLING * math.log2(max(num_nodes, 1))

    def with_overlap(overlap: float) -> float:
        exposed = max(MIN_EXPOSED * traffic_s, traffic_s - overlap * compute_s)
        return sync * compute_s / (compute_s + exposed) if compute_s > 0 else sync

    return with_overlap(OVERLAP_LOW), with_overlap(OVERLAP), with_overlap(OVERLAP_HIGH)


def fitting_sharding(
    workload: Workload, spec: AcceleratorSpec, gpus: int
) -> tuple[str, float] | None:
    """(sharding, GB per GPU) assumed on ``gpus`` GPUs: the workload's sharding, else DDP when it
    fits, else FSDP; None when that does not fit."""
    limit = usable_gb(spec)
    candidates = (workload.sharding,) if workload.sharding else ("ddp", "fsdp")
    for sharding in candidates:
        memory = training_memory_gb(workload, gpus, sharding)
        if memory <= limit:
            return sharding, memory
    return None


def scaling_efficiency(  # noqa: PLR0917 - positional order is the optimizer's contract
    gpus_per_node: int,
    num_nodes: int,
    fabric: str,
    network_gbps: float,
    spec: AcceleratorSpec,
    workload: Workload,
) -> float:
    """Expected scaling efficiency (0-1] of training ``workload`` on this configuration."""
    gpus = gpus_per_node * num_nodes
    fit = fitting_sharding(workload, spec, gpus)
    sharding = fit[0] if fit else workload.sharding or "fsdp"
    peak = spec.peak_tflops(workload.precision)
    if peak <= 0:
        return 0.0
    mfu = expected_mfu(spec, workload.precision, workload, peak)
    compute = step_compute_seconds(workload, gpus, peak, mfu)
    traffic = step_traffic_seconds(
        workload,
        spec,
        sharding,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        fabric=fabric,
        network_gbps=network_gbps,
    )
    return efficiency_band(compute, traffic, gpus, num_nodes)[1]
