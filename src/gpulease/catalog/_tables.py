"""The small reference tables shipped in ``catalog/data/`` and read once per process.

- ``instance_types.csv``: hardware facts per (provider, instance type) that price lists leave out:
  the exact accelerator part, GPU count (authoritative where an upstream list is wrong), GPU
  memory, local NVMe/SSD, network bandwidth and fabric.
- ``regions.csv``: (provider, region) → country, continent, EU/EEA flag, location.
- ``providers.csv``: provider → certifications (``hipaa`` where the provider signs a BAA).
- ``aws_spot_advisor.csv``: (region, instance type) → AWS Spot Advisor interruption band 0..4.

Every loader is cached; the tables are read-only after loading.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpulease.errors import CatalogError

DATA_DIR = Path(__file__).parent / "data"


@dataclass(frozen=True, slots=True)
class InstanceFacts:
    """What an instance type is made of (missing numbers are NaN)."""

    provider: str
    instance_type: str
    part: str
    gpu_count: int
    gpu_memory_gb: float
    nvme_gb: float
    network_gbps: float
    fabric: str


@dataclass(frozen=True, slots=True)
class RegionInfo:
    """Where a provider's region is. ``country`` is ISO 3166 alpha-2, "" when unknown."""

    provider: str
    region: str
    country: str
    continent: str
    eu_eea: bool
    location: str


UNKNOWN_REGION = RegionInfo("", "", "", "", False, "")


def read_rows(path: Path) -> Iterator[dict[str, str]]:
    """Rows of a CSV file by header name; lines starting with ``#`` are skipped."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            lines = (line for line in handle if not line.startswith("#"))
            yield from csv.DictReader(lines)
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror or exc}") from None


def number(text: str | None) -> float:
    """A float from a CSV cell; empty means NaN."""
    text = (text or "").strip()
    return float(text) if text else math.nan


@functools.cache
def instance_facts() -> dict[tuple[str, str], InstanceFacts]:
    facts = {}
    for row in read_rows(DATA_DIR / "instance_types.csv"):
        item = InstanceFacts(
            provider=row["provider"],
            instance_type=row["instance_type"],
            part=row["part"],
            gpu_count=int(row["gpu_count"]),
            gpu_memory_gb=number(row["gpu_memory_gb"]),
            nvme_gb=number(row["nvme_gb"]),
            network_gbps=number(row["network_gbps"]),
            fabric=row["fabric"] or "ethernet",
        )
        facts[(item.provider, item.instance_type)] = item
    return facts


@functools.cache
def regions() -> dict[tuple[str, str], RegionInfo]:
    table = {}
    for row in read_rows(DATA_DIR / "regions.csv"):
        info = RegionInfo(
            provider=row["provider"],
            region=row["region"],
            country=row["country"].upper(),
            continent=row["continent"],
            eu_eea=row["eu_eea"] == "1",
            location=row["location"],
        )
        table[(info.provider, info.region)] = info
    return table


@functools.cache
def provider_certifications() -> dict[str, tuple[str, ...]]:
    return {
        row["provider"]: tuple(c for c in row["certifications"].split(";") if c)
        for row in read_rows(DATA_DIR / "providers.csv")
    }


@functools.cache
def aws_interruption_bands() -> dict[tuple[str, str], int]:
    return {
        (row["region"], row["instance_type"]): int(row["band"])
        for row in read_rows(DATA_DIR / "aws_spot_advisor.csv")
    }


def certifications_of(provider: str) -> str:
    """The ``;``-joined certifications of ``provider`` ("" when it has none on record)."""
    return ";".join(provider_certifications().get(provider, ()))


#: EU member states plus Iceland, Liechtenstein and Norway (ISO alpha-2), for inferred regions.
EU_EEA = frozenset(
    ("AT", "BE", "BG", "HR", "CY", "CZ", "DK", "EE", "FI", "FR", "DE", "GR", "IE", "IT", "LV",
     "LT", "LU", "MT", "NL", "PL", "PT", "RO", "SK", "SI", "ES", "SE", "IS", "LI", "NO")
)  # fmt: skip


def _inferred(provider: str, region: str) -> RegionInfo:
    """RunPod data centres (``EU-CZ-1``) and Vast regions (``cz-prague``) name their country."""
    parts = region.replace("_", "-").split("-")
    code = ""
    if provider == "runpod" and len(parts) >= 2 and len(parts[1]) == 2:
        code = parts[1].upper()
    elif provider == "vast" and len(parts[0]) == 2:
        code = parts[0].upper()
    if not code.isalpha():
        return UNKNOWN_REGION
    return RegionInfo(provider, region, code, "", code in EU_EEA, f"{region} (inferred)")


def region_info(provider: str, region: str) -> RegionInfo:
    """The location of ``region``; an unknown region has country "" and is never EU/EEA."""
    found = regions().get((provider, region))
    return found if found is not None else _inferred(provider, region)
