"""The bundled snapshot: every row is dated, sourced, priced sanely and names a known part; the
coverage promised in docs/catalog.md holds; the upstream quirks are handled; loading is fast."""

from __future__ import annotations

import re
import time
from datetime import date

import numpy as np
import pytest

from gpulease.catalog import Catalog, _catalog, _tables
from gpulease.catalog._offers_csv import read_offers

PROVIDERS = {"aws", "gcp", "azure", "lambda", "runpod", "alibaba", "oci", "vast", "paperspace",
             "fluidstack"}  # fmt: skip


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(bundled_only=True)


def test_every_row_has_source_and_iso_as_of(catalog: Catalog) -> None:
    o = catalog.offers
    assert len(o) >= 300
    assert all(s.strip() for s in o.source.tolist())
    assert all(date.fromisoformat(d) <= date(2026, 12, 31) for d in o.as_of.tolist())
    assert catalog.as_of == date(2026, 11, 30)
    assert all(re.search(r"@[0-9a-f]{12}$", s) for s in o.source.tolist())  # file + commit


def test_prices_are_positive_or_nan_and_spot_is_below_on_demand(catalog: Catalog) -> None:
    o = catalog.offers
    for column in (o.price_on_demand, o.price_spot, o.price_reserved_1y, o.price_reserved_3y):
        assert np.all(np.isnan(column) | (column > 0))
    both = ~np.isnan(o.price_on_demand) & ~np.isnan(o.price_spot)
    assert np.all(o.price_spot[both] < o.price_on_demand[both])
    assert not np.any(np.isnan(o.price_on_demand) & np.isnan(o.price_spot))
    assert not np.any(np.isin(o.price_on_demand, [700.0]))  # GCP sentinel never leaks


def test_rows_name_known_parts_and_sane_hardware(catalog: Catalog) -> None:
    o = catalog.offers
    for i in range(len(o)):
        spec = catalog.spec_for(str(o.part[i]))
        assert spec.name == o.accelerator[i]
    cpu = o.part == "cpu"  # CPU-only instances: no GPU, no GPU memory
    assert np.all(o.gpu_count[~cpu] >= 1) and np.all(o.gpu_count[cpu] == 0)
    assert np.all(o.gpu_memory_gb[~cpu] > 0) and np.all(o.gpu_memory_gb[cpu] == 0)
    assert set(o.accelerator[cpu].tolist()) == {"CPU"} and np.all(o.vcpus[cpu] >= 1)
    assert set(o.fabric.tolist()) <= {"efa", "infiniband", "ethernet", "roce"}
    assert np.all((o.interruption_band >= -1) & (o.interruption_band <= 4))
    assert np.all(o.interruption_band[o.provider != "aws"] == -1)
    assert np.count_nonzero(o.interruption_band >= 0) > 50  # AWS Spot Advisor bands applied


def test_provider_coverage(catalog: Catalog) -> None:
    assert set(catalog.providers) == PROVIDERS
    counts = {p: int(np.count_nonzero(catalog.offers.provider == p)) for p in PROVIDERS}
    assert all(n >= 1 for n in counts.values()), counts
    assert counts["aws"] >= 100 and counts["gcp"] >= 20 and counts["lambda"] >= 100


def test_aws_families_and_gcp_machine_types_are_covered(catalog: Catalog) -> None:
    o = catalog.offers
    aws = {t.split(".")[0] for t in o.instance_type[o.provider == "aws"].tolist()}
    assert {"p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "g4dn", "g5", "g5g", "g6", "g6e",
            "gr6", "p6-b200"} <= aws  # fmt: skip
    aws_regions = set(o.region[o.provider == "aws"].tolist())
    assert {"us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1"} <= aws_regions
    gcp = set(o.instance_type[o.provider == "gcp"].tolist())
    assert {"a2-highgpu-1g", "a2-ultragpu-8g", "a3-highgpu-8g", "g2-standard-12",
            "n1-standard-8+1xT4"} <= gcp  # fmt: skip
    per_zone = o.zone[(o.provider == "aws") & (o.instance_type == "p5.48xlarge")]
    assert len(set(per_zone.tolist())) > 5  # per-zone spot prices kept


def test_every_required_accelerator_has_offers(catalog: Catalog) -> None:
    names = set(catalog.offers.accelerator.tolist())
    assert {"V100", "V100-32GB", "T4", "A10G", "A10", "L4", "L40S", "A100", "A100-80GB", "H100",
            "H200", "GH200", "B200", "MI300X", "A6000"} <= names  # fmt: skip
    parts = set(catalog.offers.part.tolist())
    assert {"A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-80GB", "H100-SXM", "H100-NVL"} <= parts


def test_instance_parts_and_fabrics(catalog: Catalog) -> None:
    def rows(instance: str) -> list[int]:
        return np.flatnonzero(catalog.offers.instance_type == instance).tolist()

    o = catalog.offers
    expect = {
        "p4d.24xlarge": ("A100-SXM4-40GB", "efa"),
        "p4de.24xlarge": ("A100-SXM4-80GB", "efa"),
        "p5.48xlarge": ("H100-SXM", "efa"),
        "p5en.48xlarge": ("H200-SXM", "efa"),
        "g5.xlarge": ("A10G", "ethernet"),
        "g6e.48xlarge": ("L40S", "ethernet"),
        "Standard_NC24ads_A100_v4": ("A100-PCIe-80GB", "ethernet"),
        "Standard_ND96isr_H100_v5": ("H100-SXM", "infiniband"),
        "gpu_8x_h100_sxm5": ("H100-SXM", "infiniband"),
        "BM.GPU.H100.8": ("H100-SXM", "roce"),
        "a3-highgpu-8g": ("H100-SXM", "ethernet"),
        "ecs.gn7e-c16g1.32xlarge": ("A100-SXM4-80GB", "ethernet"),
    }
    for instance, (part, fabric) in expect.items():
        found = rows(instance)
        assert found, instance
        assert {str(o.part[i]) for i in found} == {part}, instance
        assert {str(o.fabric[i]) for i in found} == {fabric}, instance
    p4d = rows("p4d.24xlarge")[0]
    assert (o.nvme_gb[p4d], o.network_gbps[p4d], o.gpu_memory_gb[p4d]) == (8000, 400, 40)


def test_upstream_quirks_are_handled(catalog: Catalog) -> None:
    o = catalog.offers
    nd = np.flatnonzero(o.instance_type == "Standard_ND96isr_H100_v5")
    assert set(o.gpu_count[nd].tolist()) == {8}  # upstream says 12
    p5 = (o.instance_type == "p5.48xlarge") & (o.zone == "use1-az1")
    assert np.isnan(o.price_spot[p5]).all()  # SpotPrice == Price upstream: no spot quote
    assert np.isnan(o.price_spot[o.provider == "vast"]).all()  # SpotPrice 0.00
    assert np.isnan(o.vcpus[o.provider == "vast"]).all()  # placeholder vCPUs dropped
    lam = o.instance_type == "gpu_8x_h100_sxm5"
    assert np.count_nonzero(lam) == 17 and len(set(o.price_on_demand[lam].tolist())) == 1
    a2 = (o.instance_type == "a2-highgpu-1g") & (o.region == "us-central1")
    assert o.price_on_demand[a2][0] == pytest.approx(0.73948 + 2.93391)  # host + GPU
    assert not np.any(np.char.find(o.instance_type, "_Promo") >= 0)
    assert "K80" not in o.accelerator.tolist()  # retired


def test_certifications_follow_the_baa_list(catalog: Catalog) -> None:
    o = catalog.offers
    hipaa = np.char.find(o.certifications, "hipaa") >= 0
    assert set(o.provider[hipaa].tolist()) == {"aws", "gcp", "azure", "oci"}
    assert not np.any(hipaa & np.isin(o.provider, ["alibaba", "lambda", "runpod", "vast"]))


def test_every_offer_region_has_a_country_and_eu_flags(catalog: Catalog) -> None:
    countries = catalog.countries()
    assert len(countries) == len(catalog.offers)
    unknown = set(catalog.offers.region[countries == ""].tolist())
    assert unknown <= {"europe-south-1"}  # Lambda does not say which country
    assert catalog.region_info("aws", "eu-west-1").eu_eea
    assert catalog.region_info("aws", "eu-west-1").country == "IE"
    assert catalog.region_info("gcp", "europe-west4").eu_eea
    assert catalog.region_info("azure", "westeurope").eu_eea
    assert catalog.region_info("aws", "eu-central-1").country == "DE"
    assert not catalog.region_info("aws", "eu-west-2").eu_eea  # London
    assert not catalog.region_info("gcp", "europe-west6").eu_eea  # Zurich
    assert catalog.region_info("runpod", "EU-SE-1").country == "SE"
    assert catalog.region_info("vast", "fr-france").eu_eea
    assert catalog.region_info("nowhere", "x").country == ""
    for info in _tables.regions().values():
        assert info.continent in {"EU", "AS", "NA", "SA", "OC", "AF"}, info


def test_bundled_load_is_fast_and_cached() -> None:
    _catalog._LOADED.clear()
    best = min(_timed_parse() for _ in range(3))
    assert best < 0.1, f"parsing the bundled snapshot took {best * 1000:.0f} ms"
    first = Catalog.load(bundled_only=True)
    assert Catalog.load(bundled_only=True) is first


def _timed_parse() -> float:
    start = time.perf_counter()
    read_offers(_catalog.BUNDLED_OFFERS)
    return time.perf_counter() - start


def test_shared_arrays_are_read_only() -> None:
    catalog = Catalog.load(bundled_only=True)
    with pytest.raises(ValueError, match="read-only"):
        catalog.offers.price_on_demand[0] = 0.0
