"""CPU-only offers in the catalog: the bundled snapshot's CPU instances (sourced, per provider
and region), the ``cpu`` part every catalog knows, the GPU queries that leave them out, and the
importers (SkyPilot, gpuhunt) that keep the representative families and skip the rest."""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from gpulease.catalog import Catalog, cache_path, import_skypilot, update_from_gpuhunt
from gpulease.catalog._cpu import SKIPPED, is_cpu_instance
from gpulease.catalog._gpuhunt import convert
from gpulease.catalog._skypilot import convert_rows
from gpulease.errors import CatalogError
from gpulease.optimizer import plan_all
from gpulease.spec import task_from_dict

TODAY = date(2027, 1, 15)
SKY = "skypilot-org/skypilot-catalog catalogs/"


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return Catalog.load(bundled_only=True)


def test_the_snapshot_has_cpu_instances_of_every_big_cloud(bundled: Catalog) -> None:
    o = bundled.offers
    cpu = o.gpu_count == 0
    assert set(o.part[cpu].tolist()) == {"cpu"} and set(o.accelerator[cpu].tolist()) == {"CPU"}
    families = {
        "aws": {"m6i", "c6i", "m7g", "c7g"},
        "gcp": {"n2-standard", "c2-standard"},
        "azure": {"Standard_D", "Standard_F"},
        "oci": {"VM.Standard.E4.Flex", "VM.Standard.E5.Flex"},
        "lambda": {"cpu_4x_general"},
    }
    for provider, wanted in families.items():
        types = set(o.instance_type[cpu & (o.provider == provider)].tolist())
        assert all(any(t.startswith(w) for t in types) for w in wanted), (provider, types)
        assert all(is_cpu_instance(provider, t) for t in types)
    for provider in ("aws", "gcp", "azure", "oci"):  # every region with GPUs has CPU instances
        here = o.provider == provider
        assert set(o.region[here & ~cpu].tolist()) <= set(o.region[here & cpu].tolist())
    assert np.all(o.vcpus[cpu] >= 1) and np.all(o.ram_gb[cpu] > 0)
    assert np.all(o.gpu_memory_gb[cpu] == 0) and np.all(o.interruption_band[cpu] == -1)


def test_cpu_rows_carry_upstream_prices_and_provenance(bundled: Catalog) -> None:
    o = bundled.offers

    def row(instance: str, zone: str) -> int:
        (i,) = np.flatnonzero((o.instance_type == instance) & (o.zone == zone)).tolist()
        return int(i)

    m6i = row("m6i.large", "use1-az1")  # verbatim: m6i.large,,,2.0,8.0,,0.096,0.039700,...
    assert (o.vcpus[m6i], o.ram_gb[m6i], o.price_on_demand[m6i]) == (2, 8, 0.096)
    assert o.price_spot[m6i] == 0.0397 and o.cpu_arch[m6i] == "x86_64"
    assert o.source[m6i] == f"{SKY}v8/aws/vms.csv@00148f2af367" and o.as_of[m6i] == "2026-11-30"
    m7g = row("m7g.large", "use1-az1")
    assert o.cpu_arch[m7g] == "arm64" and o.price_on_demand[m7g] == 0.0816
    n2 = row("n2-standard-2", "us-central1-a")
    assert (o.price_on_demand[n2], o.price_spot[n2]) == (0.09712, 0.03175)
    assert o.source[n2] == f"{SKY}v8/gcp/vms.csv@006059e0f18a"
    d2 = int(np.flatnonzero((o.instance_type == "Standard_D2s_v5") & (o.region == "eastus"))[0])
    assert (o.price_on_demand[d2], o.price_spot[d2]) == (0.096, 0.01056)
    lam = np.flatnonzero(o.instance_type == "cpu_4x_general")
    assert len(lam) == 17 and np.all(np.isnan(o.price_spot[lam]))  # Lambda's 17 regions
    assert "hipaa" in o.certifications[m6i] and o.certifications[int(lam[0])] == ""
    for i in np.flatnonzero(o.gpu_count == 0):
        spot = float(o.price_spot[i])
        assert math.isnan(spot) or 0 < spot < float(o.price_on_demand[i])


#: The largest CPU-only size per provider and family in the snapshot (vCPUs).
LARGEST = {
    ("aws", "m6i"): 128, ("aws", "c6i"): 128, ("aws", "m7g"): 64, ("aws", "c7g"): 64,
    ("gcp", "n2-standard"): 80, ("gcp", "c2-standard"): 60,
    ("azure", "Standard_D"): 64, ("azure", "Standard_F"): 64,
    ("oci", "VM.Standard.E4.Flex"): 128, ("oci", "VM.Standard.E5.Flex"): 128,
}  # fmt: skip


def test_the_snapshot_has_large_cpu_sizes_in_every_zone_of_the_small_ones(
    bundled: Catalog,
) -> None:
    o = bundled.offers
    cpu = o.gpu_count == 0
    for (provider, family), vcpus in LARGEST.items():
        mine = (
            cpu & (o.provider == provider) & np.char.startswith(o.instance_type.astype(str), family)
        )
        assert float(np.max(o.vcpus[mine])) == vcpus, (provider, family)
    zones = {  # a large size is listed wherever the family's 8-vCPU size is (AWS, GCP)
        "c6i.2xlarge": ["c6i.12xlarge", "c6i.16xlarge", "c6i.24xlarge", "c6i.32xlarge"],
        "m6i.2xlarge": ["m6i.12xlarge", "m6i.16xlarge", "m6i.24xlarge", "m6i.32xlarge"],
        "c7g.2xlarge": ["c7g.8xlarge", "c7g.12xlarge", "c7g.16xlarge"],
        "m7g.2xlarge": ["m7g.8xlarge", "m7g.12xlarge", "m7g.16xlarge"],
        "n2-standard-8": ["n2-standard-32", "n2-standard-48", "n2-standard-64", "n2-standard-80"],
        "c2-standard-8": ["c2-standard-30", "c2-standard-60"],
    }
    for small, large in zones.items():
        wanted = set(o.zone[o.instance_type == small].tolist())
        for name in large:
            assert set(o.zone[o.instance_type == name].tolist()) == wanted, name

    def row(instance: str, zone: str) -> int:
        (i,) = np.flatnonzero((o.instance_type == instance) & (o.zone == zone)).tolist()
        return int(i)

    c6i = row("c6i.16xlarge", "use1-az1")  # verbatim: c6i.16xlarge,,,64.0,128.0,,2.72,1.148600
    assert (o.vcpus[c6i], o.ram_gb[c6i], o.price_on_demand[c6i], o.price_spot[c6i]) == (
        64, 128, 2.72, 1.1486,
    )  # fmt: skip
    m7g = row("m7g.16xlarge", "usw2-az1")
    assert o.cpu_arch[m7g] == "arm64" and o.price_on_demand[m7g] == 2.6112
    atl = row("c6i.16xlarge", "use1-atl2-az1")  # upstream spot 3.40 > on-demand 2.72: dropped
    assert o.price_on_demand[atl] == 2.72 and math.isnan(o.price_spot[atl])
    n2 = row("n2-standard-64", "us-central1-a")
    assert (o.price_on_demand[n2], o.price_spot[n2]) == (3.10778, 1.01606)
    d64 = int(np.flatnonzero((o.instance_type == "Standard_D64s_v5") & (o.region == "eastus"))[0])
    assert (o.vcpus[d64], o.price_on_demand[d64], o.price_spot[d64]) == (64, 3.072, 0.33792)
    e4 = int(np.flatnonzero(o.instance_type == "VM.Standard.E4.Flex$_64_256")[0])
    assert (o.vcpus[e4], o.ram_gb[e4], o.price_on_demand[e4]) == (64, 256, 1.184)


@pytest.mark.parametrize(
    ("provider", "cheapest"),
    [
        ("aws", {"c6i.16xlarge", "m6i.16xlarge"}),
        ("gcp", {"n2-standard-64"}),
        ("azure", {"Standard_F64s_v2"}),
    ],
)
def test_a_64_vcpu_cpu_task_plans_a_64_vcpu_instance(
    bundled: Catalog, provider: str, cheapest: set[str]
) -> None:
    task = task_from_dict({"resources": {"cpus": "64+", "providers": [provider]}})
    result = plan_all(task, catalog=bundled, top=50, objective="cheapest", config={})
    assert result.plans and all(p.cpu_only and (p.vcpus or 0) >= 64 for p in result.plans)
    assert result.plans[0].instance_type in cheapest and result.plans[0].vcpus == 64


def test_every_catalog_knows_the_cpu_part_and_gpu_queries_leave_it_out(bundled: Catalog) -> None:
    spec = bundled.spec_for("cpu")
    assert spec.name == "CPU" and spec.peak_tflops("bf16") == 0.0
    assert "CPU" not in bundled.names()
    assert [s.part for s in bundled.parts_of("CPU")] == ["cpu"]
    assert all(o.gpu_count > 0 for o in bundled.query(providers=["aws"]))
    assert not bundled.mask(regions=["us-east-1"])[bundled.offers.gpu_count == 0].any()
    cpus = bundled.query("CPU", providers=["aws"], regions=["us-east-1"], cpu_arch="x86_64")
    assert cpus and all(o.gpu_count == 0 and o.part == "cpu" for o in cpus)
    prices = [o.price_on_demand or 0.0 for o in cpus]
    assert prices == sorted(prices) and cpus[0].instance_type == "c6i.large"
    synthetic = Catalog.synthetic(2_000, seed=1)
    assert set(synthetic.offers.part.tolist()) <= set(synthetic.accelerators)


AWS_HEADER = (
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
    "Region,AvailabilityZone,Arch\n"
)


def _sky_rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def test_skypilot_rows_without_accelerators_become_cpu_offers_of_the_kept_families() -> None:
    rows = _sky_rows(
        AWS_HEADER + "m6i.large,,,2.0,8.0,,0.096,0.039700,us-east-1,use1-az1,x86_64\n"
        "c7g.xlarge,,,4.0,8.0,,0.145,0.091200,us-east-1,use1-az1,arm64\n"
        "m5.large,,,2.0,8.0,,0.096,0.0361,us-east-1,use1-az1,x86_64\n"
        "c6i.large,,,2.0,4.0,,,,us-east-1,use1-az2,x86_64\n"
    )
    out = convert_rows(rows, "aws", as_of="2027-01-15", source="test")
    by_type = {str(r["instance_type"]): r for r in out.rows}
    assert set(by_type) == {"m6i.large", "c7g.xlarge"}
    m6i = by_type["m6i.large"]
    assert (m6i["part"], m6i["accelerator"], m6i["gpu_count"], m6i["gpu_memory_gb"]) == (
        "cpu", "CPU", 0, 0.0,
    )  # fmt: skip
    assert (m6i["vcpus"], m6i["ram_gb"], m6i["price_spot"], m6i["zone"]) == (
        2.0, 8.0, 0.0397, "use1-az1",
    )  # fmt: skip
    assert by_type["c7g.xlarge"]["cpu_arch"] == "arm64"
    assert out.skipped[SKIPPED] == 1 and out.skipped["no price: c6i.large"] == 1


def test_skypilot_gcp_cpu_hosts_and_azure_sizes() -> None:
    gcp = _sky_rows(
        "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,"
        "AvailabilityZone,Price,SpotPrice\n"
        "n2-standard-2,2.0,8.0,,,,us-central1,us-central1-a,0.09712,0.03175\n"
        "n2-standard-2,2.0,8.0,,,,us-central1,us-central1-b,0.09712,0.03175\n"
        "e2-medium,2.0,4.0,,,,us-central1,us-central1-a,0.0335,0.01\n"
    )
    out = convert_rows(gcp, "gcp", as_of="2027-01-15", source="test")
    assert [(r["instance_type"], r["zone"]) for r in out.rows] == [
        ("n2-standard-2", "us-central1-a"), ("n2-standard-2", "us-central1-b"),
    ]  # fmt: skip
    assert out.rows[0]["price_on_demand"] == 0.09712 and out.rows[0]["gpu_count"] == 0
    azure = _sky_rows(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,"
        "Region,Generation\n"
        'Standard_F2s_v2,,,2.0,4,,0.0846,0.009306,eastus,"V1,V2"\n'
        'Standard_NC16ads_A10_v4,,,16.0,200,,2.2,0.55,westus3,"V1,V2"\n'
        "Basic_A0,,,1.0,0.75,,0.018,0.0126,centralus,V1\n"
    )
    out = convert_rows(azure, "azure", as_of="2027-01-15", source="test")
    assert [r["instance_type"] for r in out.rows] == ["Standard_F2s_v2"]
    assert out.skipped[SKIPPED] == 2  # the fractional A10 vGPU and an old CPU size stay out


def test_gpuhunt_cpu_items_pair_like_gpu_items() -> None:
    item = {"instance_name": "m6i.large", "location": "us-east-1", "cpu": 2, "memory": 8.0,
            "gpu_count": 0, "gpu_name": "", "cpu_arch": "x86"}  # fmt: skip
    items = [
        ("aws", {**item, "price": 0.096, "spot": False}),
        ("aws", {**item, "price": 0.04, "spot": True}),
        ("aws", {**item, "instance_name": "m5.large", "price": 0.096, "spot": False}),
    ]
    out = convert(items, as_of="2027-01-15", source="gpuhunt")
    ((row),) = out.rows
    assert (row["instance_type"], row["part"], row["price_on_demand"], row["price_spot"]) == (
        "m6i.large", "cpu", 0.096, 0.04,
    )  # fmt: skip
    assert out.skipped[SKIPPED] == 1


def test_a_refresh_keeps_cpu_rows_but_needs_gpu_offers(tmp_path: Path) -> None:
    folder = tmp_path / "gpuhunt"
    folder.mkdir()
    header = "instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot\n"
    (folder / "aws.csv").write_text(header + "c6i.large,us-east-1,0.085,2,4.0,0,,,False\n")
    with pytest.raises(CatalogError, match="no usable GPU offers"):
        update_from_gpuhunt(source_dir=folder, today=TODAY)
    assert not cache_path().exists()
    (folder / "aws.csv").write_text(
        header + "c6i.large,us-east-1,0.085,2,4.0,0,,,False\n"
        "g6.xlarge,us-east-1,0.8048,4,16.0,1,L4,24.0,False\n"
    )
    update_from_gpuhunt(source_dir=folder, today=TODAY)
    o = Catalog.load().offers
    aws = o.provider == "aws"
    assert set(o.instance_type[aws].tolist()) == {"c6i.large", "g6.xlarge"}
    sky = tmp_path / "sky" / "aws"
    sky.mkdir(parents=True)
    (sky / "vms.csv").write_text(
        AWS_HEADER + "m6i.xlarge,,,4.0,16.0,,0.192,0.083000,us-east-1,use1-az1,x86_64\n"
        "g4dn.xlarge,T4,1.0,4.0,16.0,,0.526,0.2,us-east-1,use1-az1,x86_64\n"
    )
    import_skypilot(tmp_path / "sky", today=TODAY)
    o = Catalog.load().offers
    cpu = (o.provider == "aws") & (o.gpu_count == 0)
    assert o.instance_type[cpu].tolist() == ["m6i.xlarge"]
