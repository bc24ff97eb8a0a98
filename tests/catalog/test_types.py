"""The columnar OfferTable contract and the package's public surface."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpulease.catalog as catalog_pkg
from gpulease.catalog import Catalog, OfferTable
from gpulease.catalog._offers_csv import offers_csv_text, read_offers, table_from_rows
from gpulease.catalog.types import COLUMNS
from gpulease.errors import CatalogError


def test_public_surface_is_curated() -> None:
    assert set(catalog_pkg.__all__) == {
        "PRECISION_FALLBACKS", "AcceleratorSpec", "Catalog", "GpuSummary", "Offer", "OfferTable",
        "Precision", "RegionInfo", "cache_info", "cache_path", "clear_cache", "import_skypilot",
        "update_from_gpuhunt",
    }  # fmt: skip
    for name in catalog_pkg.__all__:
        assert getattr(catalog_pkg, name) is not None


def test_take_row_and_concat() -> None:
    table = Catalog.load(bundled_only=True).offers
    first = table.take(np.array([0, 2], dtype=np.int64))
    assert len(first) == 2 and first.row(1).instance_type == table.row(2).instance_type
    masked = table.take(table.provider == "oci")
    assert set(masked.provider.tolist()) == {"oci"}
    both = OfferTable.concat([first, masked])
    assert len(both) == 2 + len(masked) and both.row(2).source == masked.row(0).source
    assert len(OfferTable.concat([])) == 0 and len(OfferTable.empty()) == 0
    assert [o.instance_type for o in first.rows()] == first.instance_type.tolist()


def test_from_columns_checks_names_and_lengths() -> None:
    columns = OfferTable.empty().column_dict()
    with pytest.raises(ValueError, match="missing offer columns: zone"):
        OfferTable.from_columns({k: v for k, v in columns.items() if k != "zone"})
    columns = {**columns, "region": np.array(["x"])}
    with pytest.raises(ValueError, match="differ in length"):
        OfferTable.from_columns(columns)


def test_csv_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [
        {"provider": "aws", "region": "us-east-1", "instance_type": "p4d.24xlarge",
         "accelerator": "A100", "part": "A100-SXM4-40GB", "gpu_count": 8, "gpu_memory_gb": 40,
         "price_on_demand": 21.957642, "price_spot": math.nan, "interruption_band": 3,
         "certifications": "hipaa", "as_of": "2026-11-30", "source": "test"},
        {"provider": "vast", "region": "us", "instance_type": "x", "accelerator": "H100",
         "part": "H100-SXM", "gpu_count": 1, "gpu_memory_gb": 80, "price_on_demand": 1.87,
         "as_of": "2026-11-30", "source": "test"},
    ]  # fmt: skip
    table = table_from_rows(rows)
    path = tmp_path / "offers.csv"
    path.write_text(offers_csv_text(table))
    back = read_offers(path)
    for name, kind in COLUMNS.items():
        a, b = getattr(table, name), getattr(back, name)
        assert np.array_equal(a, b, equal_nan=kind is np.float64), name
    offer = back.row(1)
    assert offer.zone is None and offer.interruption_band is None and offer.price_spot is None
    assert back.row(0).interruption_band == 3 and math.isnan(back.row(1).vcpus)


def test_bad_offer_files_raise_catalog_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "offers.csv"
    with pytest.raises(CatalogError, match="cannot read"):
        read_offers(path)
    path.write_text("")
    with pytest.raises(CatalogError, match="empty offers file"):
        read_offers(path)
    header = ",".join(COLUMNS)
    path.write_text(f"{header}\n" + ",".join(["x"] * len(COLUMNS)) + "\n")
    with pytest.raises(CatalogError, match="column gpu_count"):
        read_offers(path)
    path.write_text(f"{header}\naws,us\n")
    with pytest.raises(CatalogError, match=r"offers.csv:2: expected"):
        read_offers(path)
    good = Catalog.load(bundled_only=True).offers.take(np.array([0], dtype=np.int64))
    acc, part = good.accelerator[0], good.part[0]
    text = offers_csv_text(good).replace(f",{acc},{part},", f",{acc},Z900,")
    path.write_text(text)
    with pytest.raises(CatalogError, match="unknown accelerator parts"):
        Catalog.from_csv(path)
