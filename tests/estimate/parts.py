"""Hand-written accelerator specs (dense datasheet TFLOPS) for the estimate tests."""

from __future__ import annotations

from gpulease.catalog.types import AcceleratorSpec

AMPERE = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
HOPPER = {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}


def make_spec(
    part: str,
    generation: str,
    memory_gb: float,
    bandwidth: float,
    tflops: dict[str, float],
    *,
    nvlink: float,
    form_factor: str = "SXM",
) -> AcceleratorSpec:
    return AcceleratorSpec(
        part=part, name=part, vendor="NVIDIA", architecture=generation.title(),
        generation=generation, form_factor=form_factor, memory_gb=memory_gb,
        memory_bandwidth_gbps=bandwidth, tflops=tflops, interconnect="test",
        intra_node_gbps=nvlink, tdp_w=None, release_year=2022, source="test figures",
    )  # fmt: skip
