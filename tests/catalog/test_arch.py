"""The host CPU architecture of offers: the name rule, the source's word, files written before the
column existed, and the bundled snapshot (Graviton and Grace hosts are arm64, the rest x86_64)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.catalog import Catalog
from gpulease.catalog._arch import ALIASES, arch_from_name, cpu_arch_of, normalise
from gpulease.catalog._offers_csv import offers_csv_text, read_offers
from gpulease.catalog.runtime import host_cpu_arch


@pytest.mark.parametrize(
    ("provider", "instance_type", "part", "arch"),
    [
        ("aws", "g5g.xlarge", "T4", "arm64"),
        ("aws", "g5g.16xlarge", "T4", "arm64"),
        ("aws", "c7gn.large", "", "arm64"),
        ("aws", "im4gn.large", "", "arm64"),
        ("aws", "is4gen.xlarge", "", "arm64"),
        ("aws", "x2gd.medium", "", "arm64"),
        ("aws", "a1.large", "", "arm64"),
        ("aws", "p6e-gb200.36xlarge", "", "arm64"),
        ("aws", "g4dn.xlarge", "T4", "x86_64"),
        ("aws", "g6e.xlarge", "L40S", "x86_64"),
        ("aws", "gr6.4xlarge", "L4", "x86_64"),
        ("aws", "p5en.48xlarge", "H200-SXM", "x86_64"),
        ("aws", "p6-b200.48xlarge", "B200", "x86_64"),
        ("azure", "Standard_D4ps_v5", "", "arm64"),
        ("azure", "Standard_E8pds_v5", "", "arm64"),
        ("azure", "Standard_NC4as_T4_v3", "T4", "x86_64"),
        ("azure", "Standard_ND96amsr_A100_v4", "A100-SXM4-80GB", "x86_64"),
        ("gcp", "t2a-standard-4", "", "arm64"),
        ("gcp", "c4a-highcpu-8", "", "arm64"),
        ("gcp", "a4x-highgpu-4g", "", "arm64"),
        ("gcp", "a3-highgpu-8g", "H100-SXM", "x86_64"),
        ("gcp", "n1-standard-8+4xT4", "T4", "x86_64"),
        ("gcp", "c3d-standard-4", "", "x86_64"),
        ("oci", "VM.Standard.A1.Flex", "", "arm64"),
        ("oci", "BM.GPU.A10.4", "A10", "x86_64"),
        ("oci", "BM.GPU.GB200.4", "", "arm64"),
        ("alibaba", "ecs.g8y.large", "", "arm64"),
        ("alibaba", "ecs.g6r.large", "", "arm64"),
        ("alibaba", "ecs.gn8is.2xlarge", "L20", "x86_64"),
        ("alibaba", "ecs.r7.large", "", "x86_64"),
        ("lambda", "gpu_1x_gh200", "GH200", "arm64"),
        ("lambda", "gpu_8x_h100_sxm5", "H100-SXM", "x86_64"),
        ("runpod", "1x_A100-80GB_SECURE", "A100-PCIe-80GB", "x86_64"),
    ],
)
def test_the_name_rule(provider: str, instance_type: str, part: str, arch: str) -> None:
    assert arch_from_name(provider, instance_type, part) == arch
    assert cpu_arch_of(provider, instance_type, part) == arch


def test_the_sources_word_and_how_it_meets_the_rule() -> None:
    assert cpu_arch_of("vast", "anything", "A100-SXM4-40GB", "aarch64") == "arm64"
    assert cpu_arch_of("aws", "g4dn.xlarge", "T4", "AMD64") == "x86_64"
    # gpuhunt writes x86 for catalogs that record no arch: it does not overrule a Graviton name
    assert cpu_arch_of("aws", "g5g.xlarge", "T4", "x86") == "arm64"
    assert cpu_arch_of("local", "local-cpu", "local-cpu", "ppc64le") == "ppc64le"

    class Enum:  # gpuhunt's CPUArchitecture is a str enum with .value
        value = "arm"

    assert normalise(Enum()) == "arm64" and normalise(None) == "" and normalise(" X86 ") == "x86_64"


@given(st.text(max_size=20), st.text(max_size=30), st.text(max_size=12), st.text(max_size=10))
def test_cpu_arch_of_never_fails_and_never_returns_empty(
    provider: str, instance: str, part: str, stated: str
) -> None:
    arch = cpu_arch_of(provider, instance, part, stated)
    assert arch
    if normalise(stated) in {"", "x86_64", "arm64"}:
        assert arch in {"x86_64", "arm64"}


@given(
    st.sampled_from(["c", "m", "r", "t", "x", "g", "p", "inf", "trn", "im", "is"]),
    st.integers(1, 9),
    st.text(alphabet="abcdefhinqz", max_size=3),
    st.sampled_from(["large", "xlarge", "48xlarge", "metal"]),
)
def test_aws_arm_exactly_when_g_is_an_attribute(
    family: str, generation: int, attributes: str, size: str
) -> None:
    x86 = f"{family}{generation}{attributes}.{size}"
    arm = f"{family}{generation}{attributes}g.{size}"
    assert arch_from_name("aws", x86) == "x86_64"
    assert arch_from_name("aws", arm) == "arm64"
    assert arch_from_name("gcp", arm) == "x86_64"  # the rule is per provider


@given(st.sampled_from(sorted(ALIASES)))
def test_aliases_normalise_to_our_two_names(alias: str) -> None:
    assert normalise(alias.upper()) in {"x86_64", "arm64"}
    assert normalise(normalise(alias)) == normalise(alias)


def test_run_time_offers_state_this_machine() -> None:
    assert host_cpu_arch("x86_64") == host_cpu_arch("AMD64") == "x86_64"
    assert host_cpu_arch("aarch64") == host_cpu_arch("arm64") == "arm64"
    assert host_cpu_arch("") == "x86_64"
    assert host_cpu_arch() in {"x86_64", "arm64"}


def _without_cpu_arch(table_text: str) -> str:
    rows = list(csv.DictReader(io.StringIO(table_text)))
    out = io.StringIO()
    writer = csv.DictWriter(out, [k for k in rows[0] if k != "cpu_arch"], lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: v for k, v in r.items() if k != "cpu_arch"} for r in rows)
    return out.getvalue()


def test_an_offers_file_without_the_column_still_loads(tmp_path: Path) -> None:
    bundled = Catalog.load(bundled_only=True).offers
    old = tmp_path / "offers.csv"
    old.write_text(_without_cpu_arch(offers_csv_text(bundled)), encoding="utf-8")
    assert "cpu_arch" not in old.read_text(encoding="utf-8").splitlines()[0]
    table = read_offers(old)
    np.testing.assert_array_equal(table.cpu_arch, bundled.cpu_arch)
    assert set(table.cpu_arch[table.instance_type == "g5g.xlarge"].tolist()) == {"arm64"}


def test_empty_cells_are_derived_and_spellings_normalised(tmp_path: Path) -> None:
    table = Catalog.load(bundled_only=True).offers
    g5g = int(np.flatnonzero(table.instance_type == "g5g.xlarge")[0])
    p4d = int(np.flatnonzero(table.instance_type == "p4d.24xlarge")[0])
    lines = offers_csv_text(table.take(np.array([g5g, p4d, p4d]))).splitlines()
    column = lines[0].split(",").index("cpu_arch")
    edited = [lines[0]]
    for line, stated in zip(lines[1:], ["", "AMD64", "aarch64"], strict=True):
        cells = line.split(",")
        cells[column] = stated
        edited.append(",".join(cells))
    path = tmp_path / "offers.csv"
    path.write_text("\n".join(edited) + "\n", encoding="utf-8")
    assert read_offers(path).cpu_arch.tolist() == ["arm64", "x86_64", "arm64"]


def test_the_snapshot_marks_graviton_and_grace_hosts() -> None:
    o = Catalog.load(bundled_only=True).offers
    assert set(o.cpu_arch.tolist()) == {"x86_64", "arm64"}
    arm = set(o.instance_type[(o.cpu_arch == "arm64") & (o.gpu_count > 0)].tolist())
    assert arm == {"g5g.xlarge", "g5g.16xlarge", "gpu_1x_gh200", "BM.GPU.GB200.4"}  # Grace
    arm_cpu = set(o.instance_type[(o.cpu_arch == "arm64") & (o.gpu_count == 0)].tolist())
    assert {t.split(".")[0] for t in arm_cpu} == {"m7g", "c7g"}  # Graviton3 CPU-only hosts
    x86_cpu = set(o.instance_type[(o.cpu_arch == "x86_64") & (o.gpu_count == 0)].tolist())
    assert {"m6i.large", "c6i.large", "n2-standard-2", "Standard_D2s_v5"} <= x86_cpu
    header = (Path(__file__).parents[2] / "src/gpulease/catalog/data/offers.csv").open().readline()
    assert "cpu_arch" in header.split(",")  # the snapshot states it, not derived at load time


def test_alibaba_l20_offers_come_from_the_extract() -> None:
    catalog = Catalog.load(bundled_only=True)
    l20 = catalog.query("L20", providers=["alibaba"])
    assert {(o.instance_type, o.gpu_count) for o in l20} == {
        ("ecs.gn8is.2xlarge", 1),
        ("ecs.ebmgn8is.32xlarge", 8),
    }
    assert len(l20) == 3  # ebmgn8is in ap-northeast-1 and ap-southeast-3
    for offer in l20:
        assert offer.part == "L20" and offer.accelerator == "L20" and offer.gpu_memory_gb == 48
        assert offer.cpu_arch == "x86_64" and offer.as_of == "2026-11-30"
        assert offer.source.startswith("sugarlxn/skypilot-catalog (fork) catalogs/v8/alicloud")
        assert offer.price_on_demand and offer.price_spot
    gn8is = next(o for o in l20 if o.instance_type == "ecs.gn8is.2xlarge")
    assert (gn8is.region, gn8is.zone, gn8is.price_on_demand) == (
        "ap-northeast-1", "ap-northeast-1c", 2.91309444,
    )  # fmt: skip


def test_queries_filter_by_cpu_arch() -> None:
    catalog = Catalog.load(bundled_only=True)
    anything = catalog.query("T4")
    assert anything[0].instance_type == "g5g.xlarge"  # the trap: cheapest T4 is a Graviton host
    x86 = catalog.query("T4", cpu_arch="x86_64")
    assert x86 and all(o.cpu_arch == "x86_64" for o in x86)
    assert len(x86) == len(anything) - 2 == len(catalog.query("T4", cpu_arch="any")) - 2
    assert {o.instance_type for o in catalog.query("T4", cpu_arch="arm64")} == {
        "g5g.xlarge", "g5g.16xlarge",
    }  # fmt: skip
    summary = {s.accelerator: s for s in catalog.gpu_summary(cpu_arch="x86_64")}
    assert summary["T4"].on_demand_offer is not None
    assert summary["T4"].on_demand_offer.cpu_arch == "x86_64" and "GH200" not in summary


def test_importers_read_the_sources_word() -> None:
    from gpulease.catalog._aws_live import instance_info, processor_arch
    from gpulease.catalog._gpuhunt import convert
    from gpulease.catalog._skypilot import convert_rows

    sky = {"AcceleratorName": "T4", "AcceleratorCount": "1.0", "vCPUs": "4", "MemoryGiB": "8",
           "Price": "0.42", "SpotPrice": "", "Region": "us-east-1",
           "AvailabilityZone": "z1"}  # fmt: skip
    rows = [
        {**sky, "InstanceType": "g5g.xlarge", "Arch": "arm64"},
        {**sky, "InstanceType": "g4dn.xlarge", "Arch": "x86_64"},
        {**sky, "InstanceType": "g4dn.2xlarge"},  # no Arch column: the rule
    ]
    converted = convert_rows(rows, "aws", as_of="2026-01-01", source="test")
    assert [r["cpu_arch"] for r in converted.rows] == ["arm64", "x86_64", "x86_64"]
    hunt = {"location": "somewhere", "price": "1.0", "gpu_count": "1", "gpu_name": "A100",
            "gpu_memory": "40", "spot": "False", "cpu": "8", "memory": "64"}  # fmt: skip
    items = [("vast", {**hunt, "instance_name": "box-1", "cpu_arch": "arm"}),
             ("vast", {**hunt, "instance_name": "box-2", "cpu_arch": "x86"}),
             ("vast", {**hunt, "instance_name": "box-3"})]  # fmt: skip
    got = {r["instance_type"]: r["cpu_arch"] for r in convert(items, as_of="x", source="t").rows}
    assert got == {"box-1": "arm64", "box-2": "x86_64", "box-3": "x86_64"}
    gpus = {"Gpus": [{"Name": "T4g", "Manufacturer": "NVIDIA", "Count": 1}]}
    arm = {"InstanceType": "g5g.xlarge", "GpuInfo": gpus,
           "ProcessorInfo": {"SupportedArchitectures": ["arm64"]}}  # fmt: skip
    info = instance_info(arm)
    assert info is not None and info.cpu_arch == "arm64"
    assert processor_arch({"ProcessorInfo": {"SupportedArchitectures": ["i386", "x86_64"]}}) == (
        "x86_64"
    )
    assert processor_arch({}) == ""
