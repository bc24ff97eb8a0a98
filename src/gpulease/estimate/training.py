"""Training time on one configuration (part × GPUs per node × nodes × fabric).

hours = FLOPs / (GPUs × dense peak × MFU × scaling efficiency) / 3600, with the FLOPs of
:mod:`~gpulease.estimate.shapes`, the MFU of :mod:`~gpulease.estimate.mfu` and the
efficiency of :mod:`~gpulease.estimate.scaling`. Low pairs the high MFU with the high efficiency,
high the low with the low. Pure and allocation-light: the optimizer calls it a few hundred times
per plan.
"""

from __future__ import annotations

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate.memory import (
    STATE_BYTES_PER_PARAM,
    checkpointing_assumed,
    training_memory_gb,
    usable_gb,
)
from gpulease.estimate.mfu import expected_mfu, mfu_band, on_vector_units
from gpulease.estimate.moe import (
    active_params,
    expert_layout,
    expert_nodes,
    expert_parallel_degree,
)
from gpulease.estimate.results import HoursRange, TrainingEstimate
from gpulease.estimate.scaling import (
    efficiency_band,
    expert_traffic_seconds,
    fitting_sharding,
    nodes_per_replica,
    step_compute_seconds,
    step_traffic_seconds,
)
from gpulease.estimate.shapes import training_flops, transformer_shape
from gpulease.spec.models import Workload


def count(value: float) -> str:
    """7e9 → "7B", 1.3e12 → "1.3T", 350e6 → "350M"."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def _sharding_note(
    workload: Workload, spec: AcceleratorSpec, gpus: int, sharding: str, memory: float
) -> str:
    usable = usable_gb(spec)
    if sharding == "ddp":
        return f"DDP fits: {memory:.0f} GB/GPU of {usable:.0f} GB usable on {spec.part}"
    label = "FSDP" if sharding == "fsdp" else "ZeRO-3"
    if workload.sharding is None:
        ddp = training_memory_gb(workload, gpus, "ddp")
        return (
            f"DDP needs {ddp:.0f} GB/GPU (> {usable:.0f} GB usable on {spec.part}); "
            f"{label} over {gpus} GPUs needs {memory:.0f} GB"
        )
    return f"{label} over {gpus} GPUs needs {memory:.0f} GB/GPU"


def _size(workload: Workload) -> str:
    model = workload.model
    if model.active_params is None or model.active_params >= model.params:
        return count(model.params)
    return f"{count(model.active_params)} active / {count(model.params)}"


def _moe_notes(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    num_nodes: int,
    fabric: str,
    network_gbps: float,
    compute_s: float,
) -> list[str]:
    layout = expert_layout(workload.model)
    if layout is None:
        return []
    model = workload.model
    gpus = gpus_per_node * num_nodes
    degree = expert_parallel_degree(workload, gpus)
    span = expert_nodes(workload, gpus_per_node, num_nodes)
    where = f"{span} nodes" if span > 1 else "one node"
    notes = [
        f"mixture of experts: memory for all {count(model.params)} parameters, FLOPs for the "
        f"{count(active_params(model))} active; {layout.experts} experts, "
        f"{layout.per_token} per token, spread over {degree} GPU(s) ({where})"
    ]
    if layout.assumed:
        notes.append(f"not given: assumed {' and '.join(layout.assumed)}")
    a2a = expert_traffic_seconds(
        workload,
        spec,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        fabric=fabric,
        network_gbps=network_gbps,
    )
    if a2a > 0:
        notes.append(
            f"expert all-to-all {a2a:.3g} s per step against {compute_s:.3g} s of compute "
            "(overlapped as gradient traffic is)"
        )
    return notes


def _notes(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    num_nodes: int,
    where: str,
    moe_notes: list[str],
    sharding: str,
    memory: float,
    peak: float,
    mfu: float,
    efficiency: float,
) -> tuple[str, ...]:
    gpus = gpus_per_node * num_nodes
    params = workload.model.params
    notes = [_sharding_note(workload, spec, gpus, sharding, memory)]
    if checkpointing_assumed(workload):
        notes.append("activation checkpointing assumed (≥ 1B parameters)")
    if workload.precision not in ("fp32", "tf32") and on_vector_units(spec, peak):
        hint = "; fp16 would use its tensor cores" if spec.tflops.get("fp16") else ""
        notes.append(
            f"{spec.part} has no native {workload.precision}: timed at its fp32 rate "
            f"({peak:g} TFLOPS){hint}"
        )
    notes.append(
        f"expected MFU {mfu:.0%} of {peak:g} TFLOPS {workload.precision} "
        f"({spec.generation}, {workload.model.arch} of {_size(workload)} parameters)"
    )
    notes.extend(moe_notes)
    span = min(num_nodes, nodes_per_replica(workload, spec, gpus_per_node))
    if span > 1:
        notes.append(
            f"model state {STATE_BYTES_PER_PARAM * params / 1e9:,.0f} GB is split over {span} "
            "nodes per replica (tensor/pipeline parallel); only its slice's gradients cross "
            "the network"
        )
    if gpus > 1:
        notes.append(f"scaling efficiency {efficiency:.0%} on {gpus} GPUs ({where})")
    model = workload.model
    if model.arch == "transformer" and (model.layers is None or model.hidden is None):
        shape = transformer_shape(model)
        notes.append(
            f"shape not given: assumed {shape.layers} layers × {shape.hidden} "
            f"hidden from {count(active_params(model))} parameters"
        )
    return tuple(notes)


def estimate_training(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    num_nodes: int,
    fabric: str,
    network_gbps: float,
) -> TrainingEstimate | None:
    """Time, memory and efficiency of training ``workload`` on ``num_nodes`` × ``gpus_per_node``
    GPUs of ``spec``; None when the model does not fit that configuration's memory (or the part
    has no figure for ``workload.precision`` nor a slower mode)."""
    if gpus_per_node < 1 or num_nodes < 1:
        raise ValueError("gpus_per_node and num_nodes must be at least 1")
    gpus = gpus_per_node * num_nodes
    peak = spec.peak_tflops(workload.precision)
    fit = fitting_sharding(workload, spec, gpus)
    if fit is None or peak <= 0:
        return None
    sharding, memory = fit
    flops = training_flops(workload)
    mfu_low, mfu, mfu_high = mfu_band(expected_mfu(spec, workload.precision, workload, peak))
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
    eff_low, eff, eff_high = efficiency_band(compute, traffic, gpus, num_nodes)
    ideal_hours = flops / (peak * 1e12) / 3600 / gpus
    hours = HoursRange(
        ideal_hours / (mfu_high * eff_high),
        ideal_hours / (mfu * eff),
        ideal_hours / (mfu_low * eff_low),
    )
    moe_notes = _moe_notes(
        workload,
        spec,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        fabric=fabric,
        network_gbps=network_gbps,
        compute_s=compute,
    )
    where = (
        f"{num_nodes} nodes over {fabric} {network_gbps:g} Gbps" if num_nodes > 1 else "one node"
    )
    notes = _notes(
        workload,
        spec,
        gpus_per_node=gpus_per_node,
        num_nodes=num_nodes,
        where=where,
        moe_notes=moe_notes,
        sharding=sharding,
        memory=memory,
        peak=peak,
        mfu=mfu,
        efficiency=eff,
    )
    return TrainingEstimate(
        total_flops=flops,
        sharding=sharding,
        memory_per_gpu_gb=memory,
        gpus=gpus,
        mfu=mfu,
        scaling_efficiency=eff,
        hours=hours,
        notes=notes,
        expert_parallel=expert_parallel_degree(workload, gpus),
    )
