"""Serving: tensor-parallel degree, replicas, throughput and memory."""

from __future__ import annotations

import dataclasses

import pytest

from gpulease.estimate import estimate_inference

LLAMA_70B = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8}


def _llama_70b(serve, **fields):
    fields.setdefault("requests_per_second", 5)
    fields.setdefault("prompt_tokens", 1000)
    fields.setdefault("output_tokens", 200)
    fields.setdefault("hours", 24)
    return serve(70e9, model=LLAMA_70B, **fields)


def test_serving_70b_in_bf16_needs_at_least_two_80gb_gpus(serve, h100):
    workload = _llama_70b(serve)
    assert estimate_inference(workload, h100, gpus_per_node=1) is None  # 140 GB of weights
    estimate = estimate_inference(workload, h100, gpus_per_node=8)
    assert estimate.gpus_per_replica >= 2
    assert estimate.memory_per_gpu_gb <= 80


def test_one_large_gpu_holds_70b_with_little_room_for_kv(serve, h200, b200, mi300x):
    workload = _llama_70b(serve)
    assert estimate_inference(workload, h200, gpus_per_node=1) is None  # 141 GB: not with KV
    for spec in (b200, mi300x):
        single = estimate_inference(workload, spec, gpus_per_node=1)
        assert single is not None and single.gpus_per_replica == 1
        assert single.memory_per_gpu_gb > 0.8 * spec.memory_gb
    # a long context no longer fits one B200 next to the weights
    long_context = _llama_70b(serve, context_len=131072)
    assert estimate_inference(long_context, b200, gpus_per_node=1) is None
    assert estimate_inference(long_context, b200, gpus_per_node=2) is not None


def test_tensor_parallel_degree_is_a_power_of_two_within_the_node(serve, h100, a100, a100_40):
    assert estimate_inference(_llama_70b(serve), a100_40, gpus_per_node=4) is None  # 160 GB
    for spec, gpus_per_node in ((h100, 8), (a100_40, 8), (a100, 4)):
        estimate = estimate_inference(_llama_70b(serve), spec, gpus_per_node=gpus_per_node)
        tp = estimate.gpus_per_replica
        assert tp & (tp - 1) == 0 and tp <= gpus_per_node


def test_replicas_follow_the_request_rate(serve, h100):
    def replicas(rps):
        estimate = estimate_inference(_llama_70b(serve, requests_per_second=rps), h100,
                                      gpus_per_node=8)  # fmt: skip
        return estimate.replicas, estimate.tokens_per_second_per_replica

    (one, throughput), (many, _) = replicas(0.5), replicas(200)
    assert one == 1
    assert many == pytest.approx(200 * 1200 / throughput, abs=1)


def test_decode_is_bound_by_memory_bandwidth(serve, h100, h200):
    workload = serve(8e9, requests_per_second=10, prompt_tokens=100, output_tokens=1000)
    faster_memory = dataclasses.replace(h100, memory_bandwidth_gbps=4800)
    slow = estimate_inference(workload, h100, gpus_per_node=1)
    fast = estimate_inference(workload, faster_memory, gpus_per_node=1)
    assert fast.tokens_per_second_per_replica > 1.2 * slow.tokens_per_second_per_replica


def test_prefill_is_bound_by_compute(serve, h100):
    workload = serve(8e9, requests_per_second=10, prompt_tokens=8000, output_tokens=10)
    half_compute = dataclasses.replace(h100, tflops={k: v / 2 for k, v in h100.tflops.items()})
    full = estimate_inference(workload, h100, gpus_per_node=1).tokens_per_second_per_replica
    half = estimate_inference(workload, half_compute, gpus_per_node=1)
    assert half.tokens_per_second_per_replica == pytest.approx(full / 2, rel=0.15)


def test_small_model_serves_from_one_small_gpu(serve, l4):
    estimate = estimate_inference(serve(7e9, requests_per_second=1), l4, gpus_per_node=1)
    assert estimate.gpus_per_replica == 1
    assert estimate.memory_per_gpu_gb <= 24


def test_fp8_weights_take_half_the_memory(serve, h100):
    bf16 = estimate_inference(_llama_70b(serve), h100, gpus_per_node=2)
    fp8 = estimate_inference(_llama_70b(serve, precision="fp8"), h100, gpus_per_node=1)
    assert bf16 is not None and fp8 is not None and fp8.gpus_per_replica == 1


def test_hours_come_from_the_workload_or_default_to_one(serve, h100):
    given = estimate_inference(_llama_70b(serve, hours=720), h100, gpus_per_node=8)
    assert (given.hours.low, given.hours.expected, given.hours.high) == (720, 720, 720)
    default = estimate_inference(_llama_70b(serve, hours=None), h100, gpus_per_node=8)
    assert default.hours.expected == 1
    assert any("hours not given" in note for note in default.notes)


def test_missing_load_figures_are_assumed_and_noted(serve, h100):
    estimate = estimate_inference(serve(8e9), h100, gpus_per_node=1)
    assert any("requests_per_second not given" in note for note in estimate.notes)
    assert any("prompt/output tokens not given" in note for note in estimate.notes)


def test_bad_configuration_is_rejected(serve, h100):
    with pytest.raises(ValueError, match="at least 1"):
        estimate_inference(serve(8e9), h100, gpus_per_node=0)


def test_non_transformer_has_no_kv_cache(serve, l4):
    estimate = estimate_inference(serve(25.6e6, model={"arch": "cnn"}), l4, gpus_per_node=1)
    assert estimate.gpus_per_replica == 1 and estimate.replicas >= 1
