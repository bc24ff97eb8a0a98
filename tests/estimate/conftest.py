"""Accelerator specs with hand-written datasheet figures (dense TFLOPS), and workload builders.

The estimator only reads an :class:`AcceleratorSpec`; these tests never touch the catalog's data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpulease.catalog.types import AcceleratorSpec
from gpulease.spec.models import ModelSpec, Workload

from .parts import AMPERE, HOPPER, make_spec


@pytest.fixture
def h100() -> AcceleratorSpec:
    return make_spec("H100-SXM", "hopper", 80, 3350, HOPPER, nvlink=900)


@pytest.fixture
def h200() -> AcceleratorSpec:
    return make_spec("H200-SXM", "hopper", 141, 4800, HOPPER, nvlink=900)


@pytest.fixture
def h100_pcie() -> AcceleratorSpec:
    return make_spec("H100-PCIe", "hopper", 80, 3350, HOPPER, nvlink=128, form_factor="PCIe")


@pytest.fixture
def a100() -> AcceleratorSpec:
    return make_spec("A100-80GB", "ampere", 80, 2039, AMPERE, nvlink=600)


@pytest.fixture
def a100_40() -> AcceleratorSpec:
    return make_spec("A100-40GB", "ampere", 40, 1555, AMPERE, nvlink=600)


@pytest.fixture
def v100() -> AcceleratorSpec:
    return make_spec("V100", "volta", 16, 900, {"fp32": 15.7, "fp16": 125.0}, nvlink=300)


@pytest.fixture
def b200() -> AcceleratorSpec:
    tflops = {"fp32": 80.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0}
    return make_spec("B200", "blackwell", 180, 8000, tflops, nvlink=1800)


@pytest.fixture
def mi300x() -> AcceleratorSpec:
    tflops = {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}
    return make_spec("MI300X", "cdna3", 192, 5300, tflops, nvlink=896, form_factor="OAM")


@pytest.fixture
def l4() -> AcceleratorSpec:
    tflops = {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5}
    return make_spec("L4", "ada", 24, 300, tflops, nvlink=32, form_factor="PCIe")


WorkloadFactory = Callable[..., Workload]


@pytest.fixture
def train() -> WorkloadFactory:
    """train(params, tokens=..., **fields) → a training Workload; model fields go in ``model``."""

    def build(params: float, model: dict[str, Any] | None = None, **fields: Any) -> Workload:
        fields.setdefault("tokens", 1e9)
        return Workload(model=ModelSpec(params=params, **(model or {})), **fields)

    return build


@pytest.fixture
def serve() -> WorkloadFactory:
    """serve(params, **fields) → an inference Workload."""

    def build(params: float, model: dict[str, Any] | None = None, **fields: Any) -> Workload:
        return Workload(kind="inference", model=ModelSpec(params=params, **(model or {})),
                        **fields)  # fmt: skip

    return build
