#!/usr/bin/env python3
"""Build the bundled catalog snapshot (``src/gpulease/catalog/data/``) from reference extracts.

Maintainer tool, not run by tests. Usage::

    python scripts/build_catalog.py REFERENCE_DIR [--out DIR] [--as-of YYYY-MM-DD]

``REFERENCE_DIR`` holds ``catalog-extracts/<cloud>/*.csv`` (verbatim rows of SkyPilot catalog
files, with ``#`` provenance comments) and ``spot-advisor/aws-gpu-interruption-2025-06.csv``.
Rows read later from the same upstream files live in ``data/upstream/*.supplement.csv``; the
CPU-only instances (a general-purpose and a compute family per provider) in
``data/upstream/*.cpu.supplement.csv``.

It writes:

- ``aws_spot_advisor.csv``: (region, instance type) → Spot Advisor band, GPU families only;
- ``offers.csv``: every extract and supplement row converted by
  :mod:`gpulease.catalog._skypilot` (the same code ``gpulease catalog import-skypilot`` runs;
  ``cpu_arch`` from the extract's ``Arch`` column, else the name rule of ``catalog/_arch.py``),
  deduplicated by (provider, region, zone, instance type); the Lambda extract keeps one row per
  instance type, so each is repeated for the 17 regions Lambda lists at the same price;
- ``regions.csv``: ``data/upstream/regions.base.csv`` plus the countries RunPod and Vast state
  per row, with continent and EU/EEA flag.

It fails when an offer's region has no entry in the region table.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpulease.catalog import _tables  # noqa: E402
from gpulease.catalog._convert import Converted  # noqa: E402
from gpulease.catalog._offers_csv import (  # noqa: E402
    offers_csv_text,
    table_from_rows,
    write_atomic,
)
from gpulease.catalog._skypilot import convert_rows  # noqa: E402
from gpulease.policy import EU_EEA_COUNTRIES as EU_EEA  # noqa: E402

DATA = ROOT / "src" / "gpulease" / "catalog" / "data"
SUPPLEMENTS = DATA / "upstream"
SKY = "skypilot-org/skypilot-catalog"

#: (provider, file relative to the reference dir or absolute, source written on every row)
INPUTS: list[tuple[str, str | Path, str]] = [
    (
        "aws",
        "catalog-extracts/aws/vms.v8.gpu_extract.csv",
        f"{SKY} catalogs/v8/aws/vms.csv@00148f2af367",
    ),
    ("aws", SUPPLEMENTS / "aws.v8.supplement.csv", f"{SKY} catalogs/v8/aws/vms.csv@00148f2af367"),
    (
        "aws",
        SUPPLEMENTS / "aws.v8.cpu.supplement.csv",
        f"{SKY} catalogs/v8/aws/vms.csv@00148f2af367",
    ),
    (
        "gcp",
        "catalog-extracts/gcp/vms.v8.extract.csv",
        f"{SKY} catalogs/v8/gcp/vms.csv@006059e0f18a",
    ),
    ("gcp", SUPPLEMENTS / "gcp.v8.supplement.csv", f"{SKY} catalogs/v8/gcp/vms.csv@006059e0f18a"),
    (
        "gcp",
        SUPPLEMENTS / "gcp.v8.cpu.supplement.csv",
        f"{SKY} catalogs/v8/gcp/vms.csv@006059e0f18a",
    ),
    (
        "azure",
        "catalog-extracts/azure/vms.v6.extract.csv",
        f"{SKY} catalogs/v6/azure/vms.csv@098741e70562",
    ),
    (
        "azure",
        SUPPLEMENTS / "azure.v6.cpu.supplement.csv",
        f"{SKY} catalogs/v6/azure/vms.csv@098741e70562",
    ),
    (
        "lambda",
        "catalog-extracts/lambda/vms.v8.extract.csv",
        f"{SKY} catalogs/v8/lambda/vms.csv@0f4070387edc",
    ),
    (
        "runpod",
        "catalog-extracts/runpod/vms.v8.extract.csv",
        f"{SKY} catalogs/v8/runpod/vms.csv@01acdfd419ce",
    ),
    (
        "runpod",
        SUPPLEMENTS / "runpod.v8.supplement.csv",
        f"{SKY} catalogs/v8/runpod/vms.csv@01acdfd419ce",
    ),
    (
        "oci",
        "catalog-extracts/oci/vms.v8.extract.csv",
        f"{SKY} catalogs/v8/oci/vms.csv@058875118382",
    ),
    (
        "oci",
        SUPPLEMENTS / "oci.v8.cpu.supplement.csv",
        f"{SKY} catalogs/v8/oci/vms.csv@058875118382",
    ),
    ("vast", "catalog-extracts/vast/vms.v8.csv", f"{SKY} catalogs/v8/vast/vms.csv@01b8cdda2878"),
    (
        "paperspace",
        "catalog-extracts/paperspace/vms.v6.csv",
        f"{SKY} catalogs/v6/paperspace/vms.csv@e520054145d1",
    ),
    (
        "fluidstack",
        "catalog-extracts/fluidstack/vms.v9.csv",
        f"{SKY} catalogs/v9/fluidstack/vms.csv@2c3d7ea7d76b",
    ),
    (
        "alibaba",
        "catalog-extracts/alicloud/vms.v8.extract.csv",
        "sugarlxn/skypilot-catalog (fork) catalogs/v8/alicloud/vms.csv@003c56a723d3",
    ),
]

#: The 17 regions Lambda repeats every instance type in (lambda extract comment).
LAMBDA_REGIONS = (
    "europe-central-1",
    "asia-south-1",
    "me-west-1",
    "europe-south-1",
    "asia-northeast-1",
    "asia-northeast-2",
    "australia-east-1",
    "us-east-1",
    "us-east-2",
    "us-east-3",
    "us-west-1",
    "us-west-2",
    "us-west-3",
    "us-south-1",
    "us-south-2",
    "us-south-3",
    "us-midwest-1",
)
AWS_GPU_FAMILIES = (
    "g4dn",
    "g5",
    "g5g",
    "g6",
    "g6e",
    "gr6",
    "p3",
    "p3dn",
    "p4d",
    "p4de",
    "p5",
    "p5e",
    "p5en",
    "p6-b200",
)

_EUROPE = (
    "AT",
    "BE",
    "BG",
    "CH",
    "CZ",
    "DE",
    "DK",
    "ES",
    "FI",
    "FR",
    "GB",
    "HR",
    "HU",
    "IE",
    "IS",
    "IT",
    "NL",
    "NO",
    "PL",
    "RO",
    "SE",
    "SI",
)
_ASIA = (
    "AE",
    "BH",
    "CN",
    "HK",
    "ID",
    "IL",
    "IN",
    "JP",
    "KR",
    "MY",
    "QA",
    "SA",
    "SG",
    "TH",
    "TW",
    "VN",
)
CONTINENT = {
    **dict.fromkeys(_EUROPE, "EU"),
    **dict.fromkeys(_ASIA, "AS"),
    **dict.fromkeys(("US", "CA", "MX"), "NA"),
    **dict.fromkeys(("BR", "CL"), "SA"),
    **dict.fromkeys(("AU", "NZ"), "OC"),
    **dict.fromkeys(("ZA", "MA"), "AF"),
}


def read_region_base() -> dict[tuple[str, str], tuple[str, str]]:
    """(provider, region) → (country, location) from ``data/upstream/regions.base.csv``."""
    return {
        (row["provider"], row["region"]): (row["country"], row["location"])
        for row in _tables.read_rows(SUPPLEMENTS / "regions.base.csv")
    }


def build_spot_advisor(reference: Path, out: Path) -> int:
    rows = []
    path = reference / "spot-advisor" / "aws-gpu-interruption-2025-06.csv"
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            family = row["instance_type"].split(".", 1)[0]
            if family in AWS_GPU_FAMILIES:
                rows.append(
                    (
                        row["region"],
                        row["instance_type"],
                        row["interruption_range_index"],
                        row["interruption_label"],
                        row["savings_pct_vs_od"],
                    )
                )
    lines = [
        "# AWS Spot Instance Advisor, GPU instance families, snapshot 2025-06 "
        "(spot-advisor-data.json; band 0..4 = <5%, 5-10%, 10-15%, 15-20%, >20% interrupted)",
        "region,instance_type,band,label,savings_pct_vs_on_demand",
    ]
    lines += [",".join(r) for r in sorted(rows)]
    write_atomic(out / "aws_spot_advisor.csv", "\n".join(lines) + "\n")
    _tables.aws_interruption_bands.cache_clear()
    return len(rows)


def convert_all(reference: Path, as_of: str) -> Converted:
    total = Converted()
    grouped: dict[tuple[str, str], list[dict[str, str]]] = {}
    for provider, name, source in INPUTS:  # GCP host rows need the GPU rows of another file
        path = name if isinstance(name, Path) else reference / name
        grouped.setdefault((provider, source), []).extend(_tables.read_rows(path))
    for (provider, source), rows in grouped.items():
        converted = convert_rows(rows, provider, as_of=as_of, source=source)
        if provider == "lambda":
            converted.rows = [
                {**row, "region": region} for row in converted.rows for region in LAMBDA_REGIONS
            ]
        total.extend(converted)
    seen: set[tuple[object, ...]] = set()
    unique = []
    for row in total.rows:
        key = (row["provider"], row["region"], row["zone"], row["instance_type"])
        if key not in seen:
            seen.add(key)
            unique.append(row)
    unique.sort(
        key=lambda r: (
            str(r["provider"]),
            str(r["accelerator"]),
            str(r["instance_type"]),
            str(r["region"]),
            str(r["zone"]),
        )
    )
    total.rows = unique
    return total


def build_regions(converted: Converted, out: Path) -> None:
    table = read_region_base()
    for (provider, region), country in converted.countries.items():
        table.setdefault((provider, region), (country, f"{region} ({country})"))
    missing = sorted({(str(r["provider"]), str(r["region"])) for r in converted.rows} - set(table))
    if missing:
        raise SystemExit(f"regions missing from upstream/regions.base.csv: {missing}")
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["provider", "region", "country", "continent", "eu_eea", "location"])
    for (provider, region), (country, location) in sorted(table.items()):
        continent = CONTINENT.get(country, "EU" if region.startswith("europe") else "")
        writer.writerow(
            [provider, region, country, continent, "1" if country in EU_EEA else "0", location]
        )
    write_atomic(out / "regions.csv", text.getvalue())
    _tables.regions.cache_clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "reference", type=Path, help="folder with catalog-extracts/ and spot-advisor/"
    )
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument(
        "--as-of", default="2026-11-30", help="the date the upstream rows were read (ISO)"
    )
    args = parser.parse_args(argv)
    bands = build_spot_advisor(args.reference, args.out)
    converted = convert_all(args.reference, args.as_of)
    build_regions(converted, args.out)
    table = table_from_rows(converted.rows)
    notes = [str(r.get("notes", "")) for r in converted.rows]
    write_atomic(args.out / "offers.csv", offers_csv_text(table, notes))
    per_provider = Counter(str(r["provider"]) for r in converted.rows)
    print(f"aws_spot_advisor.csv: {bands} rows")
    print(
        f"offers.csv: {len(table)} rows: "
        + ", ".join(f"{p} {n}" for p, n in sorted(per_provider.items()))
    )
    for reason, count in sorted(converted.skipped.items()):
        print(f"  skipped {count:4d}  {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
