"""Refreshing the catalog: the cache wins over the bundled snapshot, gpuhunt files and SkyPilot
catalogs import with their quirks handled, failures leave the cache alone, clear_cache resets."""

from __future__ import annotations

import json
import math
import sys
import types
import urllib.error
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from gpulease.atomic import is_temp_name
from gpulease.catalog import (
    Catalog,
    _catalog,
    cache_info,
    cache_path,
    clear_cache,
    import_skypilot,
    update_from_gpuhunt,
)
from gpulease.errors import CatalogError

TODAY = date(2027, 1, 15)


def _rows(catalog: Catalog, instance: str) -> list[int]:
    return np.flatnonzero(catalog.offers.instance_type == instance).tolist()


def test_cache_wins_over_bundled(gpulease_home: Path) -> None:
    assert Catalog.load().source == "bundled"
    cache = cache_path()
    assert cache == gpulease_home / "catalog" / "offers.csv"
    cache.parent.mkdir(parents=True)
    header, first, *_ = _catalog.BUNDLED_OFFERS.read_text().splitlines()
    cache.write_text(f"{header}\n{first}\n")
    loaded = Catalog.load()
    assert loaded.source == str(cache) and len(loaded.offers) == 1
    assert Catalog.load(bundled_only=True).source == "bundled"
    assert clear_cache() is True
    assert Catalog.load().source == "bundled"
    assert clear_cache() is False


def test_a_corrupt_cache_is_a_clear_error(gpulease_home: Path) -> None:
    cache_path().parent.mkdir(parents=True)
    cache_path().write_text("not,an,offers,file\n1,2,3,4\n")
    with pytest.raises(CatalogError, match="missing columns"):
        Catalog.load()
    assert Catalog.load(bundled_only=True).source == "bundled"


def test_update_from_gpuhunt_files_without_the_gpuhunt_package(
    gpuhunt_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)  # importing it would fail
    path = update_from_gpuhunt(source_dir=gpuhunt_dir, today=TODAY)
    assert path == cache_path() and path.exists()
    catalog = Catalog.load()
    o = catalog.offers
    assert catalog.source == str(path) and catalog.as_of == TODAY
    # refreshed providers are replaced, every other provider comes from the bundled snapshot
    aws = o.provider == "aws"
    assert set(o.instance_type[aws].tolist()) == {"p4d.24xlarge", "g6.xlarge"}
    assert {"azure", "oci", "runpod", "vast"} <= set(catalog.providers)
    assert set(o.as_of[aws].tolist()) == {"2027-01-15"}
    # on-demand and spot rows of one instance become one offer
    i = _rows(catalog, "p4d.24xlarge")[0]
    assert (o.region[i], o.price_on_demand[i], o.price_spot[i]) == ("us-east-1", 21.957642, 8.1915)
    assert o.part[i] == "A100-SXM4-40GB" and o.fabric[i] == "efa" and o.nvme_gb[i] == 8000
    assert o.interruption_band[i] in range(5)
    # GCP zones become region + zone; memory picks the 80 GB part; lambda → our provider id
    g = _rows(catalog, "a2-ultragpu-1g")[0]
    assert (o.region[g], o.zone[g], o.part[g]) == ("us-central1", "us-central1-a", "A100-SXM4-80GB")
    lam = _rows(catalog, "gpu_8x_a100_80gb_sxm4")[0]
    assert (o.provider[lam], o.part[lam], o.gpu_count[lam]) == ("lambda", "A100-SXM4-80GB", 8)
    meta = cache_info()
    assert meta is not None and meta["providers_refreshed"] == ["aws", "gcp", "lambda"]
    assert meta["skipped"] == {"unknown accelerator: RTX6000": 1}
    assert not [p for p in path.parent.iterdir() if is_temp_name(p.name)]  # nothing left behind


def test_update_from_gpuhunt_one_provider(gpuhunt_dir: Path) -> None:
    update_from_gpuhunt(["lambda"], source_dir=gpuhunt_dir, today=TODAY)
    catalog = Catalog.load()
    lam = catalog.offers.provider == "lambda"
    assert np.count_nonzero(lam) == 2
    assert np.count_nonzero(catalog.offers.provider == "aws") > 100  # bundled AWS kept


def test_live_update_without_gpuhunt_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)
    with pytest.raises(CatalogError, match=r"pip install 'gpulease\[gpuhunt\]'"):
        update_from_gpuhunt()
    assert not cache_path().exists()


def test_live_update_offline_is_a_catalog_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def query(**_: object) -> list[object]:
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setitem(sys.modules, "gpuhunt", types.SimpleNamespace(query=query))
    with pytest.raises(CatalogError, match="offline"):
        update_from_gpuhunt(["aws"])
    assert not cache_path().exists()


def test_live_update_converts_gpuhunt_items(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []

    def query(provider: list[str] | None = None) -> list[object]:
        asked.append(provider)
        item = dict(instance_name="gpu_1x_gh200", location="us-east-1", price=2.29, cpu=64,
                    memory=432.0, gpu_count=1, gpu_name="GH200", gpu_memory=96.0, spot=False,
                    provider="lambdalabs")  # fmt: skip
        return [types.SimpleNamespace(**item)]

    monkeypatch.setitem(sys.modules, "gpuhunt", types.SimpleNamespace(query=query))
    update_from_gpuhunt(["lambda"], today=TODAY)
    assert asked == [["lambdalabs"]]
    catalog = Catalog.load()
    lam = np.flatnonzero(catalog.offers.provider == "lambda")
    assert len(lam) == 1 and catalog.offers.part[lam[0]] == "GH200"
    assert cache_info()["source"] == "gpuhunt live catalog"  # type: ignore[index]


def test_a_refresh_with_no_usable_offers_leaves_the_cache(
    tmp_path: Path, gpuhunt_dir: Path
) -> None:
    update_from_gpuhunt(source_dir=gpuhunt_dir, today=TODAY)
    before = cache_path().read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "aws.csv").write_text(
        "instance_name,location,price,cpu,memory,gpu_count,gpu_name,gpu_memory,spot\n"
        "m5.large,us-east-1,0.096,2,8.0,0,,,False\n"
    )
    with pytest.raises(CatalogError, match="no usable GPU offers"):
        update_from_gpuhunt(source_dir=empty)
    assert cache_path().read_text() == before
    with pytest.raises(CatalogError, match="not a gpuhunt catalog file"):
        (empty / "aws.csv").write_text("a,b\n1,2\n")
        update_from_gpuhunt(source_dir=empty)
    with pytest.raises(CatalogError, match="not a folder"):
        update_from_gpuhunt(source_dir=tmp_path / "missing")


def test_import_skypilot_handles_the_upstream_quirks(skypilot_dir: Path) -> None:
    path = import_skypilot(skypilot_dir, today=TODAY)
    catalog = Catalog.load()
    o = catalog.offers
    assert catalog.source == str(path)
    assert {"aws", "gcp", "azure", "runpod", "vast", "lambda"} <= set(catalog.providers)
    # AWS: SpotPrice == Price is no spot quote; empty spot is none; per-zone rows kept
    p5 = {str(o.zone[i]): o.price_spot[i] for i in _rows(catalog, "p5.48xlarge")}
    assert math.isnan(p5["use1-az1"]) and p5["use1-az6"] == 17.6289
    assert math.isnan(o.price_spot[_rows(catalog, "g4dn.xlarge")[0]])
    # GCP: host + GPU summed; GPU spot >= on-demand voids spot; n1 + T4 combinations; no TPU
    a2 = {str(o.region[i]): i for i in _rows(catalog, "a2-highgpu-1g")}
    assert o.price_on_demand[a2["us-central1"]] == pytest.approx(0.73948 + 2.93391)
    assert o.price_spot[a2["us-central1"]] == pytest.approx(0.36975 + 1.4341)
    a3 = _rows(catalog, "a3-highgpu-8g")[0]
    assert o.price_on_demand[a3] == pytest.approx(9.46006 + 78.37241)
    assert math.isnan(o.price_spot[a3])
    assert {"n1-standard-8+1xT4", "n1-standard-8+2xT4"} <= set(o.instance_type.tolist())
    assert not any("tpu" in t for t in o.instance_type.tolist())
    # Azure: 12 → 8 GPUs, promo row and K80 dropped, spot == price voided
    nd = _rows(catalog, "Standard_ND96isr_H100_v5")[0]
    assert o.gpu_count[nd] == 8 and math.isnan(o.price_spot[nd])
    assert not any("Promo" in t for t in o.instance_type.tolist())
    assert "K80" not in o.accelerator.tolist()
    # RunPod: the data centre is the region; bare A100-80GB is the PCIe part
    rp = _rows(catalog, "1x_A100-80GB_SECURE")[0]
    assert (o.region[rp], o.part[rp], o.gpu_memory_gb[rp]) == ("EU-CZ-1", "A100-PCIe-80GB", 80)
    assert catalog.region_info("runpod", "EU-CZ-1").country == "CZ"
    assert catalog.region_info("runpod", "EU-PL-9").country == "PL"  # inferred from the id
    assert catalog.region_info("vast", "cz-prague").eu_eea
    # Vast: free-text region, NaN placeholders, memory from GpuInfo totals
    nvl = _rows(catalog, "1x-H100_NVL-32-65536")[0]
    assert (o.region[nvl], o.part[nvl]) == ("bg-bulgaria", "H100-NVL")
    assert math.isnan(o.vcpus[nvl]) and math.isnan(o.price_spot[nvl])
    a100 = _rows(catalog, "2x-A100_SXM4-32-65536")[0]
    assert o.part[a100] == "A100-SXM4-80GB" and o.region[a100] == "si-slovenia"
    assert o.region[_rows(catalog, "4x-H200-32-65536")[0]] == "us"
    # Lambda: both regions, InfiniBand for the 8x H100
    lam = _rows(catalog, "gpu_8x_h100_sxm5")
    assert len(lam) == 2 and {str(o.fabric[i]) for i in lam} == {"infiniband"}
    skipped = json.loads((path.parent / "meta.json").read_text())["skipped"]
    assert not any("RTX4090" in reason for reason in skipped)  # consumer cards have specs now
    rtx = _rows(catalog, "1x_RTX4090_COMMUNITY")[0]
    assert (o.accelerator[rtx], o.part[rtx]) == ("RTX4090", "RTX-4090")
    assert skipped["unknown accelerator: RTX PRO Server 6000"] == 1
    assert skipped["promotional price: Standard_NC24ads_A100_v4_Promo"] == 1
    assert skipped["retired accelerator: K80"] == 1


def test_import_skypilot_needs_vms_files(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no SkyPilot catalog files"):
        import_skypilot(tmp_path)
