"""Sizing: for each distinct hardware configuration, which node counts to consider and how long the
workload takes on each.

A configuration is (accelerator part, GPUs per node, fabric, network Gbps); tens of thousands of
offers share a few hundred configurations, so the estimator runs per configuration, never per offer.
Node counts considered: the fixed ``num_nodes`` when the task gives one, else the memory minimum and
its doublings up to ``max_nodes`` (more nodes finish sooner but scale less than linearly, so the
cheapest feasible count is usually the smallest that meets the deadline, and the fastest the largest
within budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate import estimate_inference, estimate_training, min_training_gpus
from gpulease.estimate.results import InferenceEstimate
from gpulease.spec.models import Workload

MAX_OPTIONS = 8
#: Billed time before training starts (provision, image pull, setup, first data): low, exp, high.
STARTUP_HOURS = (0.05, 0.15, 0.4)
MIN_WORK_HOURS = 0.25  # shorter than this, more nodes only add start-up time and risk
MIN_DOUBLING_GAIN = 0.15  # doubling the nodes must cut at least this share of the hours


@dataclass(slots=True)
class ConfigSizing:
    """Node-count options for one configuration; arrays have length :data:`MAX_OPTIONS`, padded
    with NaN. ``infeasible`` explains why no option exists (None when some do)."""

    nodes: npt.NDArray[np.float64]
    hours: npt.NDArray[np.float64]  # (MAX_OPTIONS, 3): low, expected, high
    notes: list[tuple[str, ...]] = field(default_factory=list)
    sharding: list[str | None] = field(default_factory=list)
    mfu: list[float] = field(default_factory=list)
    infeasible: str | None = None  # a template: "{gpus}" stands for the GPUs per node
    serving: list[InferenceEstimate | None] = field(default_factory=list)  # inference only


def _empty() -> ConfigSizing:
    return ConfigSizing(np.full(MAX_OPTIONS, np.nan), np.full((MAX_OPTIONS, 3), np.nan))


def node_options(min_nodes: int, fixed: int | None, max_nodes: int) -> list[int]:
    """The node counts to try: the fixed count, or the minimum and its doublings."""
    if fixed is not None:
        return [fixed]
    options: list[int] = []
    n = max(1, min_nodes)
    while n <= max_nodes and len(options) < MAX_OPTIONS:
        options.append(n)
        n *= 2
    return options


def _no_point_in_more_nodes(hours: npt.NDArray[np.float64], slot: int) -> bool:
    """Doubling again is not worth pricing: the job already runs for less than a quarter of an
    hour of work, or the last doubling cut less than :data:`MIN_DOUBLING_GAIN` of the time."""
    if hours[slot] - STARTUP_HOURS[1] < MIN_WORK_HOURS:
        return True
    return slot > 0 and hours[slot] > (1 - MIN_DOUBLING_GAIN) * hours[slot - 1]


def size_without_workload(fixed_nodes: int | None, hours: float | None = None) -> ConfigSizing:
    """One option: the task's nodes (1 by default), taking ``hours`` (the user's run time, when
    given; else no hours)."""
    sizing = _empty()
    sizing.nodes[0] = fixed_nodes or 1
    if hours is not None:
        sizing.hours[0] = (hours, hours, hours)
    sizing.notes.append(())
    sizing.sharding.append(None)
    sizing.mfu.append(math.nan)
    return sizing


def size_training(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    fabric: str,
    network_gbps: float,
    fixed_nodes: int | None,
    max_nodes: int,
) -> ConfigSizing:
    sizing = _empty()
    if spec.peak_tflops(workload.precision) <= 0:
        sizing.infeasible = f"{spec.part} has no usable {workload.precision} throughput"
        return sizing
    need = min_training_gpus(workload, spec)
    if need is None:
        sizing.infeasible = (
            f"model state does not fit {spec.part} ({spec.memory_gb:g} GB) at any GPU count"
        )
        return sizing
    min_gpus, sharding = need
    min_nodes = math.ceil(min_gpus / gpus_per_node)
    if workload.global_batch:  # data parallelism cannot split a batch finer than one sample
        max_nodes = min(max_nodes, max(min_nodes, workload.global_batch // gpus_per_node))
    if fixed_nodes is not None and fixed_nodes < min_nodes:
        sizing.infeasible = (
            f"needs ≥ {min_gpus} × {spec.part} ({sharding}) for memory; "
            f"num_nodes {fixed_nodes} × {{gpus}} GPUs is too few"
        )
        return sizing
    options = node_options(min_nodes, fixed_nodes, max_nodes)
    if not options:
        sizing.infeasible = (
            f"needs ≥ {min_gpus} × {spec.part} for memory, more than "
            f"{max_nodes} node(s) of {{gpus}} GPUs"
        )
        return sizing
    for slot, nodes in enumerate(options):
        est = estimate_training(
            workload,
            spec,
            gpus_per_node=gpus_per_node,
            num_nodes=nodes,
            fabric=fabric,
            network_gbps=network_gbps,
        )
        sizing.notes.append(est.notes if est else ())
        sizing.sharding.append(est.sharding if est else None)
        sizing.mfu.append(est.mfu if est else math.nan)
        if est is None:
            continue
        sizing.nodes[slot] = nodes
        sizing.hours[slot] = (
            est.hours.low + STARTUP_HOURS[0],
            est.hours.expected + STARTUP_HOURS[1],
            est.hours.high + STARTUP_HOURS[2],
        )
        if _no_point_in_more_nodes(sizing.hours[:, 1], slot):
            break
    if np.isnan(sizing.nodes).all():
        sizing.infeasible = f"model state does not fit {{gpus}} × {spec.part} per node"
    return sizing


def size_inference(
    workload: Workload,
    spec: AcceleratorSpec,
    *,
    gpus_per_node: int,
    fixed_nodes: int | None,
) -> ConfigSizing:
    sizing = _empty()
    if spec.peak_tflops(workload.precision) <= 0:
        sizing.infeasible = f"{spec.part} has no usable {workload.precision} throughput"
        return sizing
    est = estimate_inference(workload, spec, gpus_per_node=gpus_per_node)
    if est is None:
        sizing.infeasible = (
            f"weights + KV cache do not fit {{gpus}} × {spec.part} ({spec.memory_gb:g} GB each)"
        )
        return sizing
    if est.target_miss is not None:
        sizing.infeasible = (
            f"misses the latency target on {{gpus}} × {spec.part}, {est.target_miss}"
        )
        return sizing
    per_node = max(1, gpus_per_node // est.gpus_per_replica)
    nodes = math.ceil(est.replicas / per_node)
    if fixed_nodes is not None:
        if fixed_nodes < nodes:
            sizing.infeasible = (
                f"needs more nodes of {{gpus}} × {spec.part} than num_nodes "
                f"{fixed_nodes} for the request rate"
            )
            return sizing
        nodes = fixed_nodes
    sizing.nodes[0] = nodes
    sizing.hours[0] = (est.hours.low, est.hours.expected, est.hours.high)
    served = (
        f"{est.replicas} replica(s) × {est.gpus_per_replica} GPU(s), "
        f"{est.tokens_per_second_per_replica:,.0f} tok/s each"
    )
    sizing.notes.append((served, *est.notes))
    sizing.sharding.append(f"tp{est.gpus_per_replica}")
    sizing.mfu.append(math.nan)
    sizing.serving.append(est)
    return sizing
