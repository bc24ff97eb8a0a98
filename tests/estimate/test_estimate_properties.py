"""Invariants of the training estimate over random workloads and configurations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpulease.estimate import estimate_training, min_training_gpus, training_memory_gb
from gpulease.estimate.memory import usable_gb
from gpulease.spec.models import ModelSpec, Workload

from .parts import AMPERE, HOPPER, make_spec

PARTS = [
    make_spec("H100", "hopper", 80, 3350, HOPPER, nvlink=900),
    make_spec("A100-40GB", "ampere", 40, 1555, AMPERE, nvlink=600),
    make_spec("L4", "ada", 24, 300, {"fp32": 30.3, "bf16": 121.0, "fp16": 121.0}, nvlink=64,
              form_factor="PCIe"),
]  # fmt: skip


def _model(params: float, moe: tuple[float, int | None] | None) -> ModelSpec:
    if moe is None:
        return ModelSpec(params=params)
    share, experts = moe  # a mixture of experts with share × params active
    return ModelSpec(params=params, active_params=share * params, experts=experts)


mixtures = st.none() | st.tuples(st.floats(0.02, 0.9), st.none() | st.sampled_from([8, 64, 256]))

workloads = st.builds(
    lambda params, moe, tokens, seq_len, batch, precision, sharding: Workload(
        model=_model(params, moe), tokens=tokens, seq_len=seq_len, global_batch=batch,
        precision=precision, sharding=sharding,
    ),
    st.floats(1e7, 5e11),
    mixtures,
    st.floats(1e8, 1e13),
    st.none() | st.sampled_from([512, 2048, 8192, 32768]),
    st.none() | st.integers(1, 4096),
    st.sampled_from(["bf16", "fp16", "fp8", "fp32", "tf32"]),
    st.none() | st.sampled_from(["ddp", "fsdp", "zero3"]),
)  # fmt: skip


configs = st.fixed_dictionaries({
    "gpus_per_node": st.sampled_from([1, 2, 4, 8]),
    "num_nodes": st.integers(1, 64),
    "fabric": st.sampled_from(["infiniband", "efa", "roce", "ethernet", "unknown"]),
    "network_gbps": st.sampled_from([10.0, 100.0, 400.0, 3200.0]),
})  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(workload=workloads, part=st.sampled_from(PARTS), config=configs)
def test_estimates_are_consistent(workload, part, config):
    estimate = estimate_training(workload, part, **config)
    if estimate is None:
        return
    assert 0 < estimate.hours.low < estimate.hours.expected < estimate.hours.high
    assert 0 < estimate.mfu <= 0.6 and 0 < estimate.scaling_efficiency <= 1
    assert estimate.memory_per_gpu_gb <= usable_gb(part)
    assert estimate.gpus == config["gpus_per_node"] * config["num_nodes"]
    needed = min_training_gpus(workload, part)  # what fits here fits at the minimum or fewer
    assert needed is not None
    assert needed[0] <= estimate.gpus


@settings(max_examples=40, deadline=None)
@given(workload=workloads, part=st.sampled_from(PARTS))
def test_min_gpus_fit_and_are_minimal(workload, part):
    needed = min_training_gpus(workload, part)
    if needed is None:
        assert training_memory_gb(workload, 4096, workload.sharding or "fsdp") > usable_gb(part)
        return
    gpus, sharding = needed
    assert training_memory_gb(workload, gpus, sharding) <= usable_gb(part)
    if gpus > 1:
        assert training_memory_gb(workload, gpus - 1, sharding) > usable_gb(part)
