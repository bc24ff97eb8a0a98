"""Training memory per GPU by sharding, the fewest GPUs that hold it, inference weights and KV."""

from __future__ import annotations

import pytest

from gpulease.estimate import min_training_gpus, training_memory_gb
from gpulease.estimate.memory import (
    activation_bytes,
    kv_cache_gb_per_token,
    usable_gb,
    weights_gb,
)


def test_full_adam_state_of_7b_does_not_fit_one_80gb_gpu_with_ddp(train):
    workload = train(7e9)
    assert training_memory_gb(workload, 1, "ddp") > 112  # 16 bytes/param before activations
    assert training_memory_gb(workload, 8, "ddp") > 112  # DDP replicates everything


def test_fsdp_divides_the_state_by_the_gpu_count(train):
    workload = train(7e9)
    assert 14 < training_memory_gb(workload, 8, "fsdp") < 25
    assert training_memory_gb(workload, 8, "zero3") == training_memory_gb(workload, 8, "fsdp")
    assert training_memory_gb(workload, 16, "fsdp") < training_memory_gb(workload, 8, "fsdp")


def test_7b_finetune_needs_fsdp_over_several_80gb_gpus(train, h100):
    gpus, sharding = min_training_gpus(train(7e9), h100)
    assert sharding == "fsdp"
    assert gpus >= 2


def test_small_model_trains_with_ddp_on_one_gpu(train, a100):
    assert min_training_gpus(train(1.3e9, tokens=26e9), a100) == (1, "ddp")


def test_requested_sharding_is_kept(train, h100):
    assert min_training_gpus(train(7e9, sharding="zero3"), h100)[1] == "zero3"
    assert min_training_gpus(train(7e9, sharding="ddp"), h100) is None


def test_impossible_model_gives_none(train, v100):
    assert min_training_gpus(train(1e14), v100) is None


@pytest.mark.parametrize("params", [3e9, 7e9, 13e9, 70e9, 175e9])
def test_min_gpus_is_the_smallest_count_that_fits(train, a100_40, params):
    workload = train(params, seq_len=4096, global_batch=512)
    gpus, sharding = min_training_gpus(workload, a100_40)
    assert training_memory_gb(workload, gpus, sharding) <= usable_gb(a100_40)
    if gpus > 1:
        assert training_memory_gb(workload, gpus - 1, sharding) > usable_gb(a100_40)


def test_activation_checkpointing_from_1b_parameters(train):
    shape = {"layers": 24, "hidden": 2048}
    small = train(0.9e9, seq_len=2048, global_batch=4, model=shape)
    large = train(1.1e9, seq_len=2048, global_batch=4, model=shape)
    tokens = 2048 * 4  # the micro-batch: 4 sequences of 2048
    assert activation_bytes(small, 1) == pytest.approx(24 * 34 * tokens * 2048)
    assert activation_bytes(large, 1) == pytest.approx((24 * 2 + 34) * tokens * 2048)


def test_micro_batch_is_capped_by_gradient_accumulation(train):
    shape = {"layers": 24, "hidden": 2048}
    huge_batch = train(0.5e9, seq_len=2048, global_batch=4096, model=shape)
    capped = train(0.5e9, seq_len=2048, global_batch=4, model=shape)  # 8192 tokens per GPU
    assert activation_bytes(huge_batch, 8) == activation_bytes(capped, 1)


def test_fp32_doubles_activations(train):
    assert activation_bytes(train(1e9, precision="fp32"), 1) == pytest.approx(
        2 * activation_bytes(train(1e9, precision="bf16"), 1)
    )


def test_cnn_activations_grow_with_the_micro_batch(train):
    def resnet(batch):
        return train(25.6e6, tokens=None, samples=1.28e6, flops_per_sample=24.6e9,
                     global_batch=batch, model={"arch": "cnn"})  # fmt: skip

    assert activation_bytes(resnet(8), 1) < activation_bytes(resnet(32), 1)
    assert 2e9 < activation_bytes(resnet(256), 1) < 5e9  # ~100 MB per image, micro-batch of 32


def test_unknown_sharding_is_rejected(train):
    with pytest.raises(ValueError, match="sharding"):
        training_memory_gb(train(1e9), 8, "tp")


def test_inference_weights_and_kv_cache(serve):
    llama_70b = serve(70e9, model={"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8})
    assert weights_gb(llama_70b) == pytest.approx(140)
    # 2 (K, V) × 80 layers × 8 KV heads × 128 head dim × 2 bytes
    assert kv_cache_gb_per_token(llama_70b) == pytest.approx(2 * 80 * 8 * 128 * 2 / 1e9)
    fp8 = serve(70e9, precision="fp8", model={"layers": 80, "hidden": 8192, "kv_heads": 8})
    assert weights_gb(fp8) == pytest.approx(70)
