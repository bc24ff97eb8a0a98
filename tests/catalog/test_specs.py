"""Accelerator specs: every named part is there, figures are dense, fallbacks are as documented."""

from __future__ import annotations

import pytest

from gpulease.catalog import PRECISION_FALLBACKS, Catalog
from gpulease.catalog._specs import PRECISIONS

REQUIRED_PARTS = {
    "V100-SXM2-16GB", "V100-SXM2-32GB", "T4", "A10G", "A10", "L4", "L40S", "A100-SXM4-40GB",
    "A100-PCIe-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "H100-SXM", "H100-PCIe", "H100-NVL",
    "H200-SXM", "H200-NVL", "GH200", "B200", "MI250X", "MI300X", "Gaudi2", "RTX-A6000",
    "RTX-6000-Ada", "P100-PCIe-16GB", "K80",
}  # fmt: skip
REQUIRED_NAMES = {
    "V100", "V100-32GB", "T4", "A10G", "A10", "L4", "L40S", "A100", "A100-80GB", "H100", "H200",
    "GH200", "B200", "MI250X", "MI300X", "Gaudi2", "A6000", "RTX6000-Ada", "P100", "K80",
}  # fmt: skip


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(bundled_only=True)


def test_every_named_accelerator_has_a_spec(catalog: Catalog) -> None:
    assert set(catalog.accelerators) >= REQUIRED_PARTS
    assert set(catalog.names()) >= REQUIRED_NAMES


@pytest.mark.parametrize(
    ("part", "precision", "dense"),
    [
        ("H100-SXM", "bf16", 989.4),
        ("H100-SXM", "fp8", 1978.9),
        ("H100-SXM", "fp64", 34.0),
        ("H100-PCIe", "bf16", 756.0),
        ("H200-SXM", "bf16", 989.0),
        ("A100-SXM4-40GB", "bf16", 312.0),
        ("A100-SXM4-40GB", "tf32", 156.0),
        ("A100-PCIe-80GB", "fp32", 19.5),
        ("V100-SXM2-16GB", "fp16", 125.0),
        ("T4", "fp16", 65.0),
        ("L4", "bf16", 121.0),
        ("L40S", "bf16", 362.0),
        ("B200", "bf16", 2250.0),
        ("MI300X", "bf16", 1307.4),
        ("MI250X", "bf16", 383.0),
        ("MI250X", "fp64", 47.9),
        ("Gaudi2", "bf16", 432.0),
    ],
)
def test_dense_peaks_match_the_datasheets(
    catalog: Catalog, part: str, precision: str, dense: float
) -> None:
    assert catalog.spec_for(part).peak_tflops(precision) == pytest.approx(dense)


@pytest.mark.parametrize(
    ("part", "precision", "sparse"),
    [
        ("H100-SXM", "bf16", 1978.9),
        ("A100-SXM4-40GB", "bf16", 624.0),
        ("L4", "bf16", 242.5),
        ("L40S", "bf16", 733.0),
        ("MI300X", "bf16", 2614.9),
        ("MI250X", "fp64", 383.0),
    ],
)
def test_sparse_or_mislabelled_figures_are_never_used(
    catalog: Catalog, part: str, precision: str, sparse: float
) -> None:
    assert catalog.spec_for(part).peak_tflops(precision) != pytest.approx(sparse)


#: Parts whose datasheet ratios differ from NVIDIA's 1 : 2 : 4 (TF32 : BF16 : FP8), and why.
OWN_RATIOS = {"Gaudi3": "Intel's MME runs FP8 at the BF16 rate, FP16 and TF32 at a quarter of it"}


def test_dense_ratios_are_consistent(catalog: Catalog) -> None:
    """Dense FP8 is twice dense BF16 and TF32 half of it on every part that has them; a sparse
    figure mixed in would break the ratio."""
    for spec in catalog.accelerators.values():
        if spec.part in OWN_RATIOS:
            continue
        t = spec.tflops
        if "fp8" in t and "bf16" in t:
            assert t["fp8"] / t["bf16"] == pytest.approx(2.0, rel=0.02), spec.part
        if "tf32" in t and "bf16" in t:
            assert t["tf32"] / t["bf16"] == pytest.approx(0.5, rel=0.02), spec.part
        if "bf16" in t and "fp16" in t:
            assert t["bf16"] == t["fp16"], spec.part


def test_no_bf16_on_volta_and_turing_falls_back_to_fp32(catalog: Catalog) -> None:
    v100 = catalog.spec_for("V100-SXM2-16GB")
    assert "bf16" not in v100.tflops
    assert v100.peak_tflops("bf16") == 15.7  # not the 125 FP16 tensor figure
    assert catalog.spec_for("T4").peak_tflops("bf16") == 8.1


def test_fallback_chains(catalog: Catalog) -> None:
    assert catalog.spec_for("A100-SXM4-80GB").peak_tflops("fp8") == 312.0  # fp8 → bf16
    assert catalog.spec_for("V100-SXM2-32GB").peak_tflops("fp8") == 15.7  # fp8 → bf16 → fp32
    assert catalog.spec_for("V100-SXM2-16GB").peak_tflops("tf32") == 15.7  # tf32 → fp32
    assert catalog.spec_for("V100-SXM2-16GB").peak_tflops("int8") == 125.0  # int8 → fp16
    assert catalog.spec_for("L4").peak_tflops("fp64") == 0.0  # no slower mode
    assert set(PRECISION_FALLBACKS) == set(PRECISIONS)
    with pytest.raises(ValueError, match="unknown precision"):
        catalog.spec_for("L4").peak_tflops("fp4")


def test_specs_carry_source_confidence_and_sane_numbers(catalog: Catalog) -> None:
    for spec in catalog.accelerators.values():
        if spec.part == "cpu":  # the built-in CPU-only part has no GPU figures
            assert spec.name == "CPU" and spec.tflops == {} and spec.memory_gb == 0
            continue
        assert spec.source and spec.confidence in {"high", "medium", "low"}, spec.part
        assert spec.memory_gb > 0 and spec.memory_bandwidth_gbps > 0, spec.part
        assert spec.intra_node_gbps > 0 and 2014 <= spec.release_year <= 2026, spec.part
        assert spec.interconnect in {"nvlink", "pcie", "infinity-fabric", "roce"}, spec.part
        assert all(v > 0 for v in spec.tflops.values()), spec.part
    assert catalog.spec_for("A10G").confidence == "low"  # disputed figures stay flagged


def test_parts_of_a_name(catalog: Catalog) -> None:
    # H100 is the SXM part; the PCIe and NVL boards are names of their own
    assert [s.part for s in catalog.parts_of("h100")] == ["H100-SXM"]
    assert [s.part for s in catalog.parts_of("H100-NVL")] == ["H100-NVL"]
    assert [s.part for s in catalog.parts_of("h100-pcie")] == ["H100-PCIe"]
    assert [s.part for s in catalog.parts_of("H200-NVL")] == ["H200-NVL"]
    assert [s.part for s in catalog.parts_of("A100-80GB")] == ["A100-PCIe-80GB", "A100-SXM4-80GB"]
    assert [s.part for s in catalog.parts_of("H100-SXM")] == ["H100-SXM"]
    assert [s.part for s in catalog.parts_of("RTX4090")] == ["RTX-4090"]
    assert catalog.parts_of("RTX3090") == []
