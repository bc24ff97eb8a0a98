"""Expected model FLOPs utilisation by generation, size, architecture, form factor, precision."""

from __future__ import annotations

import dataclasses

import pytest

from gpulease.estimate import estimate_training, utilisation


def _expected(spec, workload, precision=None):
    return utilisation(spec, precision or workload.precision, workload)[1]


def test_band_is_ordered_and_bounded(train, h100, a100, v100, l4):
    for spec in (h100, a100, v100, l4):
        for params in (1e8, 7e9, 4e11):
            low, expected, high = utilisation(spec, "bf16", train(params))
            assert 0 < low < expected < high <= 0.85


def test_large_dense_transformers_land_near_published_mfu(train, a100, h100):
    # LLaMA 65B: 380 tokens/s/GPU on A100 ≈ 48 %; Llama 3.1 405B: 38-43 % on H100
    assert 0.42 <= _expected(a100, train(65e9)) <= 0.55
    assert 0.33 <= _expected(h100, train(405e9)) <= 0.43


def test_small_models_get_lower_mfu(train, h100, a100):
    for spec in (h100, a100):
        assert _expected(spec, train(1.35e8)) < _expected(spec, train(7e9))
        assert _expected(spec, train(7e9)) < _expected(spec, train(7e10))
    # the faster part loses more on small matrices
    ratio_h100 = _expected(h100, train(1.35e8)) / _expected(h100, train(7e10))
    ratio_a100 = _expected(a100, train(1.35e8)) / _expected(a100, train(7e10))
    assert ratio_h100 < ratio_a100


def test_cnns_get_lower_mfu_than_transformers(train, a100):
    cnn = train(25.6e6, tokens=None, samples=1e6, flops_per_sample=24.6e9, model={"arch": "cnn"})
    assert _expected(a100, cnn) < 0.5 * _expected(a100, train(7e9))


def test_pcie_parts_get_lower_mfu(train, h100, h100_pcie):
    assert _expected(h100_pcie, train(7e9)) < _expected(h100, train(7e9))


def test_fp8_is_faster_than_bf16_but_not_twice(train, h100):
    def hours(precision):
        workload = train(70e9, tokens=1e11, precision=precision)
        estimate = estimate_training(workload, h100, gpus_per_node=8, num_nodes=8,
                                     fabric="infiniband", network_gbps=3200)  # fmt: skip
        return estimate.hours.expected

    assert 1.1 < hours("bf16") / hours("fp8") < 2.0


def test_fp8_on_a_part_without_it_runs_at_bf16(train, a100):
    assert _expected(a100, train(7e9), "fp8") == _expected(a100, train(7e9), "bf16")


def test_bf16_on_volta_is_timed_at_the_fp32_rate(train, v100):
    workload = train(1e9, tokens=1e9, sharding="fsdp")
    args = {"gpus_per_node": 8, "num_nodes": 1, "fabric": "infiniband", "network_gbps": 100}
    bf16 = estimate_training(workload, v100, **args)
    fp16 = estimate_training(workload.model_copy(update={"precision": "fp16"}), v100, **args)
    assert bf16.hours.expected > 2 * fp16.hours.expected
    assert any("no native bf16" in note for note in bf16.notes)


def test_plain_fp32_reaches_more_of_its_smaller_peak(train, v100):
    assert _expected(v100, train(1e9), "fp32") > _expected(v100, train(1e9), "fp16")


def test_unknown_generation_gets_a_conservative_default(train, h100):
    mystery = dataclasses.replace(h100, generation="someday")
    assert _expected(mystery, train(70e9)) < _expected(h100, train(70e9))


def test_part_without_a_figure_for_the_precision_is_not_estimated(train, h100):
    bf16_only = dataclasses.replace(h100, tflops={"bf16": 989.4})
    assert utilisation(bf16_only, "fp32", train(1e9)) == (0.0, 0.0, 0.0)
    estimate = estimate_training(train(1e9, precision="fp32"), bf16_only, gpus_per_node=8,
                                 num_nodes=1, fabric="infiniband", network_gbps=100)  # fmt: skip
    assert estimate is None


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp8", "tf32", "fp32"])
def test_every_precision_has_a_positive_mfu_on_hopper(train, h100, precision):
    assert _expected(h100, train(7e9), precision) > 0
