"""Training time per configuration, and the sanity examples a senior ML engineer checks first."""

from __future__ import annotations

import time

import pytest

from gpulease.estimate import estimate_training, min_training_gpus, training_flops

ONE_NODE = {"gpus_per_node": 8, "num_nodes": 1, "fabric": "efa", "network_gbps": 400}


def test_finetuning_7b_on_1b_tokens_on_h100(train, h100):
    """7B full fine-tune, 1B tokens, bf16: Adam state ~112 GB needs FSDP; ≈4.2e19 FLOPs.

    At 100 % of H100's 989 TFLOPS that is 11.8 GPU-hours; published 7-8B runs on H100 reach
    20-35 % end to end, so the estimate is ~40 GPU-hours, with 25 in its low band. (The issue's
    "10-20 GPU-hours" would need 60-100 % MFU.)"""
    workload = train(7e9, kind="finetune", tokens=1e9)
    gpus, sharding = min_training_gpus(workload, h100)
    assert (sharding, gpus >= 2) == ("fsdp", True)
    estimate = estimate_training(workload, h100, **ONE_NODE)
    assert estimate.total_flops == pytest.approx(4.2e19)
    assert estimate.sharding == "fsdp"
    assert any("DDP needs 11" in note and "FSDP over 8 GPUs" in note for note in estimate.notes)
    gpu_hours = estimate.hours.scale(estimate.gpus)
    assert 11.8 < gpu_hours.low < 30 < gpu_hours.expected < 50 < gpu_hours.high


def test_pretraining_1_3b_on_26b_tokens_takes_several_hundred_a100_hours(train, a100):
    estimate = estimate_training(train(1.3e9, tokens=26e9), a100, **ONE_NODE)
    assert estimate.total_flops == pytest.approx(2.03e20, rel=0.01)
    assert 250 < estimate.hours.scale(8).expected < 800


def test_resnet50_90_epochs_takes_a_few_hours_on_8_a100(train, a100):
    """1.28M images × 90 epochs × 24.6 GFLOPs (4.1 GMAC forward, ×2 FLOP/MAC, ×3 for training).

    NVIDIA's reference: ~3 h on 8×A100 in AMP. 12.3 GFLOPs is the MAC count; given that, the
    estimate halves."""

    def resnet(flops_per_sample):
        return train(25.6e6, tokens=None, samples=1.28e6, flops_per_sample=flops_per_sample,
                     epochs=90, precision="fp16", model={"arch": "cnn"})  # fmt: skip

    flops_right = estimate_training(resnet(24.6e9), a100, **ONE_NODE)
    assert 1 < flops_right.hours.expected < 6
    assert flops_right.hours.low < 3 < flops_right.hours.high * 1.2
    macs_as_flops = estimate_training(resnet(12.3e9), a100, **ONE_NODE)
    assert macs_as_flops.hours.expected == pytest.approx(flops_right.hours.expected / 2, rel=0.01)


def test_hours_band_is_ordered(train, a100, h100):
    for spec in (a100, h100):
        for nodes in (1, 4):
            hours = estimate_training(
                train(13e9, tokens=1e11),
                spec,
                gpus_per_node=8,
                num_nodes=nodes,
                fabric="efa",
                network_gbps=400,
            ).hours
            assert 0 < hours.low < hours.expected < hours.high  # fmt: skip


def test_estimate_reports_what_it_assumed(train, h100):
    workload = train(70e9, tokens=1e11)
    estimate = estimate_training(workload, h100, gpus_per_node=8, num_nodes=16,
                                 fabric="infiniband", network_gbps=3200)  # fmt: skip
    assert estimate.gpus == 128
    assert estimate.total_flops == training_flops(workload)
    assert estimate.sharding == "fsdp"
    assert 0.3 < estimate.mfu < 0.45 and 0.5 < estimate.scaling_efficiency <= 1
    assert estimate.memory_per_gpu_gb < 80
    expected = estimate.total_flops / (128 * 989.4e12 * estimate.mfu * estimate.scaling_efficiency)
    assert estimate.hours.expected == pytest.approx(expected / 3600)


def test_configuration_too_small_for_the_model_gives_none(train, a100, v100):
    assert estimate_training(train(70e9, sharding="ddp"), a100, **ONE_NODE) is None
    assert estimate_training(train(70e9), v100, **ONE_NODE) is None
    assert estimate_training(train(1e12), a100, gpus_per_node=1, num_nodes=1, fabric="efa",
                             network_gbps=100) is None  # fmt: skip


def test_more_gpus_finish_sooner_for_a_few_more_gpu_hours(train, h100):
    workload = train(13e9, tokens=1e11, seq_len=4096, global_batch=512)

    def run(nodes):
        return estimate_training(workload, h100, gpus_per_node=8, num_nodes=nodes,
                                 fabric="efa", network_gbps=3200)  # fmt: skip

    small, large = run(2), run(8)
    assert large.hours.expected < small.hours.expected / 3
    assert large.hours.scale(64).expected >= small.hours.scale(16).expected


def test_h100_beats_a100_and_a100_beats_v100(train, h100, a100, v100):
    workload = train(1.3e9, tokens=1e10, precision="fp16")
    hours = [estimate_training(workload, spec, **ONE_NODE).hours.expected
             for spec in (h100, a100, v100)]  # fmt: skip
    assert hours == sorted(hours)


def test_bad_configuration_is_rejected(train, a100):
    with pytest.raises(ValueError, match="at least 1"):
        estimate_training(train(1e9), a100, gpus_per_node=0, num_nodes=1, fabric="efa",
                          network_gbps=100)  # fmt: skip


def test_estimate_is_fast_enough_for_the_optimizer(train, h100):
    """The optimizer calls this a few hundred times per plan: keep it in the tens of µs."""
    workload = train(70e9, tokens=2e12, seq_len=4096, global_batch=1024)
    calls = 300
    start = time.perf_counter()
    for nodes in range(1, calls + 1):
        estimate_training(workload, h100, gpus_per_node=8, num_nodes=nodes % 64 + 3,
                          fabric="efa", network_gbps=3200)  # fmt: skip
    per_call = (time.perf_counter() - start) / calls
    assert per_call < 500e-6  # ~40 µs here; generous for slow CI machines
