"""Merge live AWS figures (:mod:`._aws_live`) into an offer table; pure, no I/O.

For each queried region the AWS rows are rebuilt:

- an instance type with spot quotes gets one row per zone that quoted it (the newest quote wins);
  its on-demand price, hardware and fabric come from the region's existing row of that type (or,
  for a type the catalog lacks there, from ``instance_types.csv`` / DescribeInstanceTypes with no
  on-demand price); a spot price at or above on-demand is no spot quote (NaN), as in the snapshot;
- an existing type without quotes keeps its rows, refreshed with the instance facts and bands;
- vCPUs, RAM and the host CPU architecture come from DescribeInstanceTypes; GPU count and memory
  too, unless ``instance_types.csv`` has the type (the curated authority): disagreements are
  counted;
- the band is the Spot Advisor's when given, else the row's own.

Rows built or refreshed here carry ``source = "aws-api"`` and ``as_of`` = the update date; rows of
other regions and providers are returned untouched.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from gpulease.catalog._aws_live import PROVIDER, SOURCE, InstanceInfo, RegionData, newest_quotes
from gpulease.catalog._convert import offer_row
from gpulease.catalog._names import resolve
from gpulease.catalog._offers_csv import table_from_rows
from gpulease.catalog._tables import instance_facts
from gpulease.catalog.types import COLUMNS, OfferTable

Row = dict[str, object]


@dataclass
class Merged:
    """The merged table and what happened (counts by event)."""

    table: OfferTable
    stats: Counter[str] = field(default_factory=Counter)


def _rows_of(table: OfferTable, index: Iterable[int]) -> list[Row]:
    columns = table.column_dict()
    return [{name: columns[name][i].item() for name in COLUMNS} for i in index]


def _apply_facts(row: Row, info: InstanceInfo | None, stats: Counter[str]) -> None:
    if info is None:
        return
    row["vcpus"], row["ram_gb"] = info.vcpus, info.ram_gb
    if info.cpu_arch:
        row["cpu_arch"] = info.cpu_arch
    curated = instance_facts().get((PROVIDER, str(row["instance_type"])))
    if curated is None:
        row["gpu_count"] = info.gpu_count
        if not math.isnan(info.gpu_memory_gb):
            row["gpu_memory_gb"] = info.gpu_memory_gb
    elif curated.gpu_count != info.gpu_count:
        stats["gpu count differs from instance_types.csv (kept curated)"] += 1


def _stamp(row: Row, as_of: str, band: int | None) -> Row:
    row["source"], row["as_of"] = SOURCE, as_of
    if band is not None:
        row["interruption_band"] = band
    return row


def _with_spot(template: Row, zone: str, spot: float) -> Row:
    row = dict(template)
    on_demand = float(row["price_on_demand"])  # type: ignore[arg-type]
    row["zone"] = zone
    row["price_spot"] = math.nan if not math.isnan(on_demand) and spot >= on_demand else spot
    return row


def _new_template(region: str, info: InstanceInfo | None, instance_type: str) -> Row | None:
    """A row for a type the region's catalog lacks (no on-demand price), or None if unknown."""
    facts = instance_facts().get((PROVIDER, instance_type))
    name = info.gpu_name if info else ""
    memory = info.gpu_memory_gb if info else None
    resolved = resolve(PROVIDER, instance_type, name, memory_gb=memory)
    if resolved is None or (facts is None and info is None):
        return None
    count = facts.gpu_count if facts else info.gpu_count  # type: ignore[union-attr]
    return offer_row(
        provider=PROVIDER, region=region, zone="", instance_type=instance_type,
        resolved=resolved, gpu_count=count, vcpus=info.vcpus if info else None,
        ram_gb=info.ram_gb if info else None, on_demand=math.nan, spot=math.nan,
        as_of="", source=SOURCE, memory_gb=memory, cpu_arch=info.cpu_arch if info else "",
    )  # fmt: skip


def _region_rows(
    existing: list[Row], data: RegionData, bands: Mapping[tuple[str, str], int] | None,
    as_of: str, stats: Counter[str],
) -> list[Row]:  # fmt: skip
    by_type: dict[str, list[Row]] = defaultdict(list)
    for row in existing:
        by_type[str(row["instance_type"])].append(row)
    quoted: dict[str, dict[str, float]] = defaultdict(dict)
    for (instance_type, zone), quote in newest_quotes(data.quotes).items():
        quoted[instance_type][data.zone_ids.get(zone, zone)] = quote.price
    out: list[Row] = []
    for instance_type in sorted(set(by_type) | set(quoted)):
        info = data.infos.get(instance_type)
        band = bands.get((data.region, instance_type)) if bands is not None else None
        rows = by_type.get(instance_type)
        template = dict(rows[0]) if rows else _new_template(data.region, info, instance_type)
        if template is None:
            stats["spot quotes of unknown GPU types skipped"] += 1
            continue
        if instance_type not in quoted:
            for row in rows or []:
                _apply_facts(row, info, stats)
                out.append(_stamp(row, as_of, band) if info or band is not None else row)
            continue
        _apply_facts(template, info, stats)
        stats["types added" if not rows else "types updated"] += 1
        for zone, price in sorted(quoted[instance_type].items()):
            out.append(_stamp(_with_spot(template, zone, price), as_of, band))
    return out


def merge(
    current: OfferTable,
    regions: Mapping[str, RegionData],
    bands: Mapping[tuple[str, str], int] | None,
    *,
    as_of: str,
) -> Merged:
    """``current`` with the AWS rows of ``regions`` rebuilt from the live data (module doc)."""
    stats: Counter[str] = Counter()
    in_scope = (current.provider == PROVIDER) & np.isin(current.region, sorted(regions))
    kept = current.take(~in_scope)
    scoped = _rows_of(current, np.flatnonzero(in_scope).tolist())
    new_rows: list[Row] = []
    for region, data in regions.items():
        existing = [r for r in scoped if r["region"] == region]
        new_rows.extend(_region_rows(existing, data, bands, as_of, stats))
    priced = [r for r in new_rows if not _unpriced(r)]
    stats["rows without any price dropped"] += len(new_rows) - len(priced)
    stats["rows"] = len(priced)
    return Merged(OfferTable.concat([kept, table_from_rows(priced)]), stats)


def _unpriced(row: Row) -> bool:
    return all(math.isnan(float(row[k])) for k in ("price_on_demand", "price_spot"))  # type: ignore[arg-type]
