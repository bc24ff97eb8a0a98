"""StepTimer / throughput: the arithmetic, MFU against the catalog's dense peaks, accelerator names
from real ``torch.cuda.get_device_name()`` strings, warm-up and window, CPU (no peak), and that
``import gpulease.train`` does not import torch."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from gpulease.clock import VirtualClock
from gpulease.errors import UserInputError
from gpulease.train import StepTimer, Throughput, throughput
from gpulease.train import timer as timer_module
from gpulease.train.timer import detect_accelerator, peak_tflops, resolve_accelerator


def test_throughput_arithmetic_and_mfu_against_the_h100_bf16_peak() -> None:
    result = throughput(
        seconds=2.0, samples=100, flops_per_sample=1e12, accelerator="H100", precision="bf16"
    )
    assert result.step_time_s == 2.0
    assert result.samples_per_s == 50.0
    assert result.tokens_per_s == 0.0
    assert result.achieved_tflops == pytest.approx(50.0)
    assert result.accelerator == "H100-SXM"
    assert result.peak_tflops == 989.4
    assert result.mfu == pytest.approx(50.0 / 989.4)
    on_two = throughput(
        seconds=2.0, samples=100, flops_per_sample=1e12, accelerator="H100", num_devices=2
    )
    assert on_two.mfu == pytest.approx(50.0 / (2 * 989.4))


def test_tokens_and_parts() -> None:
    result = throughput(
        seconds=0.5,
        tokens=4096,
        flops_per_token=6 * 1.0e9,
        accelerator="A100-SXM4-80GB",
        precision="bf16",
    )
    assert result.tokens_per_s == 8192.0
    assert result.achieved_tflops == pytest.approx(6e9 * 4096 / 0.5 / 1e12)
    assert result.mfu == pytest.approx(result.achieved_tflops / 312.0)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("accelerator", "precision", "peak"),
    [
        ("H100", "bf16", 989.4),
        ("H100", "fp16", 989.4),
        ("H100", "tf32", 494.7),
        ("H100", "fp32", 67.0),  # TF32 off: the CUDA-core peak
        ("H100-PCIe", "bf16", 756.0),
        ("A100", "fp8", 312.0),  # no fp8 on Ampere → the bf16 figure
        ("V100", "bf16", 15.7),  # no bf16 on Volta → fp32 (catalog fallbacks)
        ("A10G", "tf32", 62.5),
        ("Gaudi2", "fp32", None),  # no usable figure
    ],
)
def test_dense_peak_per_precision(accelerator: str, precision: str, peak: float | None) -> None:
    part = resolve_accelerator(accelerator)
    assert part is not None
    assert peak_tflops(part, precision) == peak
    result = throughput(
        seconds=1.0,
        samples=1,
        flops_per_sample=1e12,
        accelerator=accelerator,
        precision=precision,
    )
    assert result.peak_tflops == peak
    assert result.mfu == (pytest.approx(1.0 / peak) if peak else None)


@pytest.mark.parametrize(
    ("device_name", "part"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H100 NVL", "H100-NVL"),
        ("NVIDIA H200", "H200-SXM"),
        ("NVIDIA H200 NVL", "H200-NVL"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
        ("Tesla V100-PCIE-16GB", "V100-PCIe-16GB"),
        ("Tesla P100-PCIE-16GB", "P100-PCIe-16GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A10", "A10"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI250X/MI250", "MI250X"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA H800", "H800-SXM"),
        ("NVIDIA GeForce RTX 3090", None),
    ],
)
def test_device_names_resolve_to_catalog_parts(device_name: str, part: str | None) -> None:
    assert resolve_accelerator(device_name) == part


def test_memory_refines_a_bare_name() -> None:
    # detect_accelerator appends the device's memory when the name lacks it
    assert resolve_accelerator("NVIDIA H100 NVL 94GB") == "H100-NVL"
    assert resolve_accelerator("NVIDIA H100 PCIe 85GB") == "H100-PCIe"
    assert resolve_accelerator("NVIDIA A100 85GB") == "A100-SXM4-80GB"


def test_bad_arguments_are_named() -> None:
    with pytest.raises(UserInputError, match=r"accelerator='RTX3090' is not in the catalog"):
        throughput(seconds=1.0, accelerator="RTX3090")
    with pytest.raises(UserInputError, match=r"precision='int4'"):
        throughput(seconds=1.0, precision="int4")
    with pytest.raises(UserInputError, match=r"seconds=0"):
        throughput(seconds=0)
    with pytest.raises(UserInputError, match=r"not both"):
        throughput(seconds=1.0, samples=1, tokens=1, flops_per_sample=1.0, flops_per_token=1.0)
    with pytest.raises(UserInputError, match=r"no samples were counted"):
        throughput(seconds=1.0, tokens=5, flops_per_sample=1.0)
    with pytest.raises(UserInputError, match=r"num_devices=0"):
        throughput(seconds=1.0, num_devices=0)
    with pytest.raises(UserInputError, match=r"window=0"):
        StepTimer(window=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the CPU case")
def test_cpu_has_no_peak_so_no_mfu() -> None:
    assert detect_accelerator() is None
    result = throughput(seconds=1.0, samples=10, flops_per_sample=1e9)
    assert result.achieved_tflops == pytest.approx(0.01)
    assert (result.accelerator, result.peak_tflops, result.mfu) == (None, None, None)
    assert "MFU" not in str(result)


def test_step_context_manager_excludes_warmup() -> None:
    clock = VirtualClock(start=0.0)
    timer = StepTimer(flops_per_sample=1e9, warmup=2, accelerator="L4", clock=clock.now)
    for _ in range(2):
        with timer.step(samples=1000):
            clock.advance(0.15)
    assert timer.measured == 0
    with pytest.raises(UserInputError, match=r"no step measured yet \(2 seen"):
        timer.throughput()
    for _ in range(3):
        with timer.step(samples=8):
            clock.advance(0.02)
    result = timer.throughput()
    assert timer.measured == 3
    assert result.step_time_s == pytest.approx(0.02)
    assert result.samples_per_s == pytest.approx(8 / 0.02)
    assert result.achieved_tflops == pytest.approx(1e9 * 8 / 0.02 / 1e12)
    assert result.mfu == pytest.approx(result.achieved_tflops / 121.0)


def test_window_keeps_the_last_steps_and_failed_steps_do_not_count() -> None:
    clock = VirtualClock(start=0.0)
    timer = StepTimer(warmup=0, window=3, accelerator="H100", flops_per_token=1e6, clock=clock.now)
    for seconds in (0.2, 0.2, 0.01, 0.02, 0.03):
        with timer.step(tokens=100):
            clock.advance(seconds)
    with pytest.raises(RuntimeError), timer.step(tokens=100):
        clock.advance(5.0)
        raise RuntimeError("a failed step")
    result = timer.throughput()
    assert timer.measured == 3 and timer.steps_seen == 5
    assert result.step_time_s == pytest.approx(0.02)  # the last three: 0.01, 0.02, 0.03
    assert result.tokens_per_s == pytest.approx(300 / 0.06)
    assert result.accelerator == "H100-SXM" and result.mfu is not None
    assert "MFU" in str(result) and "H100-SXM" in str(result)
    timer.reset()
    assert timer.measured == 0


def test_the_default_clock_times_a_real_step() -> None:
    timer = StepTimer(warmup=0, accelerator="L4")
    with timer.step(samples=1):
        sum(range(1000))
    assert timer.clock is time.perf_counter
    assert timer.throughput().step_time_s > 0


def test_str_is_a_log_line() -> None:
    line = str(
        Throughput(
            step_time_s=0.25,
            samples_per_s=256.0,
            tokens_per_s=524288.0,
            achieved_tflops=400.0,
            peak_tflops=989.4,
            mfu=400.0 / 989.4,
            accelerator="H100-SXM",
        )
    )
    assert line == (
        "step 250.0 ms | 256.0 samples/s | 524,288 tokens/s | 400.0 TFLOPS | "
        "MFU 40.4% of 989.4 TFLOPS peak (H100-SXM)"
    )
    small = Throughput(
        step_time_s=0.001, samples_per_s=64_000.0, tokens_per_s=0.0, achieved_tflops=0.0123
    )
    assert str(small) == "step 1.0 ms | 64,000.0 samples/s | 12.3 GFLOPS"  # CPU-sized runs


def test_catalog_is_loaded_once() -> None:
    for _ in range(3):
        throughput(seconds=1.0, samples=1, flops_per_sample=1.0, accelerator="L4")
    assert timer_module._catalog.cache_info().misses <= 1


def test_importing_gpulease_train_does_not_import_torch() -> None:
    code = "import sys, gpulease.train; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
