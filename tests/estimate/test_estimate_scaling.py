"""Scaling efficiency by GPUs per node, interconnect, fabric and communication volume."""

from __future__ import annotations

import dataclasses

import pytest

from gpulease.estimate import scaling_efficiency
from gpulease.estimate.scaling import efficiency_band


def test_one_gpu_scales_perfectly(train, a100):
    assert scaling_efficiency(1, 1, "ethernet", 10, a100, train(7e8)) == 1.0


def test_efficiency_is_a_fraction(train, a100, h100):
    for spec in (a100, h100):
        for nodes in (1, 2, 16, 256):
            value = scaling_efficiency(8, nodes, "efa", 400, spec, train(7e9))
            assert 0 < value <= 1


@pytest.mark.parametrize(
    ("faster", "slower"),
    [
        (("infiniband", 3200), ("efa", 400)),
        (("efa", 400), ("ethernet", 100)),
        (("ethernet", 100), ("ethernet", 10)),
        (("infiniband", 400), ("ethernet", 400)),
    ],
)
def test_faster_fabric_scales_better(train, a100, faster, slower):
    workload = train(7e9, tokens=1e11)
    fast = scaling_efficiency(8, 8, *faster, a100, workload)
    slow = scaling_efficiency(8, 8, *slower, a100, workload)
    assert fast > slow


def test_slow_ethernet_hurts_a_7b_model_across_nodes(train, a100):
    assert scaling_efficiency(8, 4, "ethernet", 10, a100, train(7e9)) < 0.5


def test_more_nodes_scale_less(train, h100):
    workload = train(7e9, tokens=1e11, seq_len=4096, global_batch=256)
    values = [scaling_efficiency(8, nodes, "efa", 400, h100, workload) for nodes in (1, 4, 16, 64)]
    assert values == sorted(values, reverse=True)


def test_nvlink_scales_better_than_pcie_inside_a_node(train, h100, h100_pcie):
    workload = train(3e9, tokens=1e10, global_batch=64, seq_len=2048)
    pcie_only = dataclasses.replace(h100, intra_node_gbps=32)
    assert scaling_efficiency(8, 1, "efa", 400, h100, workload) > scaling_efficiency(
        8, 1, "efa", 400, pcie_only, workload
    )


def test_bigger_steps_hide_more_traffic(train, a100):
    small_steps = train(7e9, tokens=1e11, seq_len=2048, global_batch=64)
    big_steps = train(7e9, tokens=1e11, seq_len=2048, global_batch=2048)
    assert scaling_efficiency(8, 8, "ethernet", 100, a100, big_steps) > scaling_efficiency(
        8, 8, "ethernet", 100, a100, small_steps
    )


def test_zero3_across_nodes_moves_more_than_hybrid_fsdp(train, a100):
    fsdp = train(7e9, tokens=1e11, sharding="fsdp", global_batch=64, seq_len=2048)
    zero3 = train(7e9, tokens=1e11, sharding="zero3", global_batch=64, seq_len=2048)
    assert scaling_efficiency(8, 8, "efa", 100, a100, zero3) < scaling_efficiency(
        8, 8, "efa", 100, a100, fsdp
    )


def test_efficiency_band_is_ordered():
    low, expected, high = efficiency_band(compute_s=1.0, traffic_s=1.5, gpus=64, num_nodes=8)
    assert 0 < low < expected < high <= 1
    assert efficiency_band(1.0, 0.0, 1, 1) == (1.0, 1.0, 1.0)
