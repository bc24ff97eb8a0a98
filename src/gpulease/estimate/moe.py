"""Mixture-of-experts: which parameters a token uses, how the experts are laid out over the GPUs,
and the expert-parallel all-to-all traffic of a training step.

A model is a mixture of experts when ``ModelSpec.active_params`` is below ``params``. Then:

- FLOPs follow the active parameters (6·N_active per training token) and the shape (layers ×
  hidden) is derived from them when not given: a token runs through a 37B-wide network;
- memory follows the total: every expert has weights, gradients and optimizer state. The total
  splits into routed-expert parameters E_p and shared ones S (attention, embeddings, dense
  layers, shared experts) from N = S + E_p and N_active = S + (k / E)·E_p, so
  E_p = (N − N_active) / (1 − k/E) (DeepSeek-V3: 654B of 671B, as its 58 MoE layers × 256
  experts × 3·7168·2048 give);
- expert parallelism of degree e (``Workload.expert_parallel``; unset: min(experts, GPUs))
  spreads each layer's routed experts over e GPUs, node by node;
- each token is sent to k experts and comes back, forward and backward: 4 passes of k·h values
  per MoE layer (16-bit; the forward dispatch in fp8 when training in fp8, as DeepSeek-V3 does).
  A share (min(e, g) − 1)/e of them stays inside the node (NVLink / PCIe), (e − g)/e crosses
  the network, where each GPU has 1/g of the node's NICs (Lepikhin et al. 2020, GShard, for
  the dispatch / combine pattern; the DeepSeek-V3 report, arXiv:2412.19437 §3.2.1, finds
  cross-node expert parallelism costs about as long as the computation on H800).

Missing ``experts`` are taken as 64, missing ``experts_per_token`` as min(8, experts / 4) (8 of
256 DeepSeek-V3, 2 of 8 Mixtral, 4 of 16 DBRX), and every layer as an MoE layer; the notes say so.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from gpulease.spec.models import ModelSpec, Workload

DEFAULT_EXPERTS = 64
MAX_DEFAULT_PER_TOKEN = 8
A2A_PASSES = 4  # dispatch + combine, forward and backward
A2A_BYTES = {"fp32": 4.0, "tf32": 4.0}  # per value and pass; 16-bit otherwise
FP8_DISPATCH_SAVING = 1.0  # bytes per value saved by the forward dispatch in fp8
GB = 1e9


@dataclass(frozen=True, slots=True)
class ExpertLayout:
    """How a mixture-of-experts model splits: ``expert_params`` in routed experts (all layers),
    ``shared_params`` in everything else; ``assumed`` names the figures that were not given."""

    experts: int
    per_token: int
    expert_params: float
    shared_params: float
    assumed: tuple[str, ...]


def is_moe(model: ModelSpec) -> bool:
    return model.active_params is not None and model.active_params < model.params


def active_params(model: ModelSpec) -> float:
    """The parameters one token uses: ``active_params``, or all of them for a dense model."""
    return model.params if model.active_params is None else model.active_params


@functools.lru_cache(maxsize=256)
def expert_layout(model: ModelSpec) -> ExpertLayout | None:
    """The expert / shared split of ``model``; None for a dense model."""
    if not is_moe(model):
        return None
    assumed: list[str] = []
    experts = model.experts
    if experts is None:
        experts = DEFAULT_EXPERTS
        assumed.append(f"{experts} experts")
    per_token = model.experts_per_token
    if per_token is None:
        per_token = min(MAX_DEFAULT_PER_TOKEN, max(1, experts // 4))
        assumed.append(f"{per_token} experts per token")
    total, active = model.params, active_params(model)
    share = per_token / experts
    routed = total - active if share >= 1 else min(total, (total - active) / (1 - share))
    return ExpertLayout(experts, per_token, routed, total - routed, tuple(assumed))


def expert_parallel_degree(workload: Workload, gpus: int) -> int:
    """GPUs each layer's routed experts are spread over: the workload's ``expert_parallel``
    (at most ``gpus``), else min(experts, GPUs); 1 for a dense model."""
    layout = expert_layout(workload.model)
    if layout is None:
        return 1
    if workload.expert_parallel is not None:
        return max(1, min(workload.expert_parallel, gpus))
    return max(1, min(layout.experts, gpus))


def model_state_params(workload: Workload, gpus: int, sharding: str) -> float:
    """Parameters whose 16-byte training state one GPU holds: all of them over ``gpus`` with
    FSDP / ZeRO-3; with DDP the shared ones whole and the routed experts over the
    expert-parallel degree."""
    total = workload.model.params
    if gpus <= 1:
        return total
    if sharding != "ddp":
        return total / gpus
    layout = expert_layout(workload.model)
    if layout is None:
        return total
    return layout.shared_params + layout.expert_params / expert_parallel_degree(workload, gpus)


def gathered_params_per_layer(workload: Workload, gpus: int, layers: int) -> float:
    """Parameters of one layer an FSDP GPU gathers: the shared ones and its local experts."""
    layout = expert_layout(workload.model)
    assert layout is not None
    degree = expert_parallel_degree(workload, gpus)
    return (layout.shared_params + layout.expert_params / degree) / max(layers, 1)


def all_to_all_bytes_per_token(workload: Workload, layers: int, hidden: int) -> float:
    """Bytes one token moves through expert all-to-alls per training step (0 when dense)."""
    layout = expert_layout(workload.model)
    if layout is None:
        return 0.0
    per_value = A2A_BYTES.get(workload.precision, 2.0) * A2A_PASSES
    if workload.precision == "fp8":
        per_value -= FP8_DISPATCH_SAVING
    return per_value * layout.per_token * hidden * layers


def all_to_all_seconds(
    workload: Workload,
    *,
    bytes_per_token: float,
    tokens_per_gpu: float,
    gpus_per_node: int,
    num_nodes: int,
    intra_node_bytes_per_s: float,
    node_network_bytes_per_s: float,
) -> float:
    """Seconds per step of expert all-to-all traffic on one GPU if nothing overlapped it."""
    degree = expert_parallel_degree(workload, gpus_per_node * num_nodes)
    if degree <= 1 or bytes_per_token <= 0:
        return 0.0
    moved = bytes_per_token * tokens_per_gpu
    local = min(degree, gpus_per_node)
    seconds = moved * (local - 1) / degree / intra_node_bytes_per_s
    if degree > local:
        per_gpu_network = node_network_bytes_per_s / gpus_per_node
        seconds += moved * (degree - local) / degree / per_gpu_network
    return seconds


def expert_nodes(workload: Workload, gpus_per_node: int, num_nodes: int) -> int:
    """Nodes one expert-parallel group spans (1 when it fits a node, or for a dense model)."""
    degree = expert_parallel_degree(workload, gpus_per_node * num_nodes)
    return max(1, min(num_nodes, math.ceil(degree / gpus_per_node)))
