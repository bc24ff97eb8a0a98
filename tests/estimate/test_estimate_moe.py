"""Mixture of experts: FLOPs follow the active parameters, memory the total, and the expert
all-to-all rides on the fabric."""

from __future__ import annotations

import pytest

from gpulease.catalog.types import AcceleratorSpec
from gpulease.estimate import (
    estimate_training,
    min_training_gpus,
    scaling_efficiency,
    training_flops,
    training_memory_gb,
)
from gpulease.estimate.moe import expert_layout, expert_parallel_degree
from gpulease.estimate.scaling import expert_traffic_seconds

from .conftest import WorkloadFactory

V3 = {"active_params": 37e9, "experts": 256, "experts_per_token": 8, "layers": 61,
      "hidden": 7168}  # fmt: skip
DENSE_37B = {"layers": 61, "hidden": 7168}


def _config(**overrides: object) -> dict[str, object]:
    config: dict[str, object] = {"gpus_per_node": 8, "num_nodes": 32, "fabric": "infiniband",
                                 "network_gbps": 3200.0}  # fmt: skip
    config.update(overrides)
    return config


def test_flops_follow_the_active_parameters(train: WorkloadFactory) -> None:
    moe = train(671e9, V3, tokens=1e12, seq_len=4096)
    dense = train(37e9, DENSE_37B, tokens=1e12, seq_len=4096)
    assert training_flops(moe) == training_flops(dense)
    assert training_flops(moe) == pytest.approx((6 * 37e9 + 12 * 61 * 7168 * 4096) * 1e12)


def test_memory_follows_the_total_parameters(train: WorkloadFactory, h100: AcceleratorSpec) -> None:
    moe = train(671e9, V3, tokens=1e12, seq_len=4096)
    dense = train(37e9, DENSE_37B, tokens=1e12, seq_len=4096)
    state_gb = 16 * 671e9 / 256 / 1e9  # FSDP over 256 GPUs
    assert training_memory_gb(moe, 256, "fsdp") > state_gb
    # the 634B inactive parameters' state is there too (less ~1 GB of gather buffer)
    extra_state_gb = 16 * (671e9 - 37e9) / 256 / 1e9
    difference = training_memory_gb(moe, 256, "fsdp") - training_memory_gb(dense, 256, "fsdp")
    assert difference == pytest.approx(extra_state_gb, abs=1.5)
    need_moe, need_dense = min_training_gpus(moe, h100), min_training_gpus(dense, h100)
    assert need_moe is not None and need_dense is not None
    assert need_moe[0] >= 16 * 671e9 / (0.9 * 80e9)  # 149 GPUs hold 671B, not 37B
    assert need_dense[0] < 16  # 37B dense fits two nodes
    assert estimate_training(moe, h100, **_config(num_nodes=2)) is None
    assert estimate_training(dense, h100, **_config(num_nodes=2)) is not None


def test_deepseek_v3_splits_into_its_routed_experts(train: WorkloadFactory) -> None:
    layout = expert_layout(train(671e9, V3).model)
    assert layout is not None and not layout.assumed
    # 58 MoE layers × 256 experts × 3 · 7168 · 2048 = 654B routed parameters
    assert layout.expert_params == pytest.approx(58 * 256 * 3 * 7168 * 2048, rel=0.01)
    assert layout.shared_params == pytest.approx(671e9 - layout.expert_params)
    assert expert_layout(train(7e9).model) is None


def test_missing_expert_figures_are_assumed_and_said(
    train: WorkloadFactory, h100: AcceleratorSpec
) -> None:
    workload = train(47e9, {"active_params": 13e9}, tokens=1e12)
    layout = expert_layout(workload.model)
    assert layout is not None and layout.experts == 64 and layout.per_token == 8
    estimate = estimate_training(workload, h100, **_config(num_nodes=4))
    assert estimate is not None
    notes = " | ".join(estimate.notes)
    assert "not given: assumed 64 experts and 8 experts per token" in notes
    assert "memory for all 47B parameters, FLOPs for the 13B active" in notes


def test_expert_parallel_degree_is_min_of_experts_and_gpus_or_as_given(
    train: WorkloadFactory, h100: AcceleratorSpec
) -> None:
    moe = train(671e9, V3)
    assert expert_parallel_degree(moe, 2048) == 256
    assert expert_parallel_degree(moe, 64) == 64
    pinned = train(671e9, V3, expert_parallel=64)
    assert expert_parallel_degree(pinned, 2048) == 64
    assert expert_parallel_degree(train(7e9), 2048) == 1
    # DDP keeps the shared parameters whole and spreads the experts: more EP, less memory
    assert training_memory_gb(moe, 2048, "ddp") < training_memory_gb(pinned, 2048, "ddp")
    estimate = estimate_training(pinned, h100, **_config(num_nodes=256))
    assert estimate is not None and estimate.expert_parallel == 64
    assert any("spread over 64 GPU(s) (8 nodes)" in note for note in estimate.notes)


def test_all_to_all_depends_on_the_fabric(train: WorkloadFactory, h100: AcceleratorSpec) -> None:
    moe = train(671e9, V3, tokens=1e12, seq_len=4096, global_batch=4096, expert_parallel=64)
    fast = expert_traffic_seconds(moe, h100, **_config())
    slow = expert_traffic_seconds(moe, h100, **_config(fabric="ethernet", network_gbps=400.0))
    assert 0 < fast < slow
    assert scaling_efficiency(8, 32, "infiniband", 3200.0, h100, moe) > scaling_efficiency(
        8, 32, "ethernet", 400.0, h100, moe
    )
    # experts inside one node: only NVLink traffic, the same whatever the network
    in_node = train(671e9, V3, tokens=1e12, seq_len=4096, global_batch=4096, expert_parallel=8)
    assert expert_traffic_seconds(in_node, h100, **_config()) == pytest.approx(
        expert_traffic_seconds(in_node, h100, **_config(fabric="ethernet", network_gbps=100.0))
    )
    assert expert_traffic_seconds(in_node, h100, **_config()) < fast
    # a dense model moves no tokens between GPUs
    assert expert_traffic_seconds(train(37e9, DENSE_37B, seq_len=4096), h100, **_config()) == 0


def test_fp8_dispatch_moves_fewer_bytes(train: WorkloadFactory, h100: AcceleratorSpec) -> None:
    bf16 = train(671e9, V3, seq_len=4096, global_batch=4096, expert_parallel=64)
    fp8 = train(671e9, V3, seq_len=4096, global_batch=4096, expert_parallel=64, precision="fp8")
    assert expert_traffic_seconds(fp8, h100, **_config()) == pytest.approx(
        7 / 8 * expert_traffic_seconds(bf16, h100, **_config())
    )


def test_moe_runs_slower_per_flop_than_a_dense_model(
    train: WorkloadFactory, h100: AcceleratorSpec
) -> None:
    moe = train(671e9, V3, tokens=1e12, seq_len=4096, expert_parallel=64)
    dense = train(37e9, DENSE_37B, tokens=1e12, seq_len=4096)
    moe_estimate = estimate_training(moe, h100, **_config(num_nodes=64))
    dense_estimate = estimate_training(dense, h100, **_config(num_nodes=64))
    assert moe_estimate is not None and dense_estimate is not None
    assert moe_estimate.mfu < dense_estimate.mfu
    assert moe_estimate.hours.expected > dense_estimate.hours.expected
    band = moe_estimate.hours
    assert band.low < band.expected < band.high
