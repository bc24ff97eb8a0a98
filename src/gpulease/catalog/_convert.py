"""Shared by every importer: one upstream offer → one row of our schema.

:func:`offer_row` fills what price lists leave out (part, NVMe, network, fabric from
``instance_types.csv``; certifications from ``providers.csv``; the AWS Spot Advisor band; the host
CPU architecture from the source's word and the names, :mod:`gpulease.catalog._arch`) and
applies the price rules common to all sources:

- an empty, zero or sentinel price (GCP's ``700.0``) is no price (NaN);
- a spot price equal to or above the on-demand price is not a real spot quote (NaN) — AWS lists
  ``SpotPrice == Price`` where there is no spot capacity, Azure and RunPod copy the on-demand price;
- an offer with neither price is skipped.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from gpulease.catalog._arch import cpu_arch_of
from gpulease.catalog._names import RETIRED, Resolved
from gpulease.catalog._specs import bundled_specs
from gpulease.catalog._tables import aws_interruption_bands, certifications_of, instance_facts

#: Prices upstream lists use as placeholders, not prices.
SENTINEL_PRICES = frozenset({700.0})


@dataclass
class Converted:
    """Rows converted from one source, what was skipped (reason → count), and countries the
    source stated for (provider, region)."""

    rows: list[dict[str, object]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    countries: dict[tuple[str, str], str] = field(default_factory=dict)

    def extend(self, other: Converted) -> None:
        self.rows.extend(other.rows)
        self.skipped.update(other.skipped)
        self.countries.update(other.countries)


def price(text: object) -> float:
    """A price cell → float; empty, non-positive and sentinel values → NaN."""
    if text is None or text == "":
        return math.nan
    value = float(text)  # type: ignore[arg-type]
    if value <= 0 or value in SENTINEL_PRICES or math.isnan(value):
        return math.nan
    return value


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def offer_row(
    *,
    provider: str,
    region: str,
    zone: str,
    instance_type: str,
    resolved: Resolved,
    gpu_count: int,
    vcpus: float | None,
    ram_gb: float | None,
    on_demand: float,
    spot: float,
    as_of: str,
    source: str,
    memory_gb: float | None = None,
    notes: tuple[str, ...] = (),
    cpu_arch: object = "",
) -> dict[str, object]:
    """One offer in our schema (see the module docstring for the rules applied); ``cpu_arch`` is
    what the source states ("" when it states nothing)."""
    spec = bundled_specs()[resolved.part]
    facts = instance_facts().get((provider, instance_type))
    notes_list = list(notes)
    if not math.isnan(spot) and not math.isnan(on_demand) and spot >= on_demand:
        spot = math.nan
        notes_list.append("upstream spot price >= on-demand: no real spot quote")
    if resolved.assumed:
        notes_list.append(f"form factor not stated upstream; {resolved.part} assumed")
    if facts is not None:
        memory = facts.gpu_memory_gb
    elif memory_gb is not None and not math.isnan(memory_gb):
        memory = memory_gb
    else:
        memory = spec.memory_gb
    band = aws_interruption_bands().get((region, instance_type), -1) if provider == "aws" else -1
    return {
        "provider": provider,
        "region": region,
        "zone": zone,
        "instance_type": instance_type,
        "accelerator": resolved.name,
        "part": resolved.part,
        "gpu_count": gpu_count,
        "gpu_memory_gb": memory,
        "vcpus": _nan_if_none(vcpus),
        "cpu_arch": cpu_arch_of(provider, instance_type, resolved.part, cpu_arch),
        "ram_gb": _nan_if_none(ram_gb),
        "nvme_gb": facts.nvme_gb if facts else math.nan,
        "network_gbps": facts.network_gbps if facts else math.nan,
        "fabric": facts.fabric if facts else "ethernet",
        "price_on_demand": on_demand,
        "price_spot": spot,
        "price_reserved_1y": math.nan,
        "price_reserved_3y": math.nan,
        "interruption_band": band,
        "certifications": certifications_of(provider),
        "as_of": as_of,
        "source": source,
        "notes": "; ".join(notes_list),
    }


def skip_reason(
    resolved: Resolved | None, gpu_count: float, on_demand: float, spot: float
) -> str | None:
    """Why an offer cannot be used, or None when it can."""
    if resolved is None:
        return "unknown accelerator"
    if resolved.part in RETIRED:
        return "retired accelerator"
    if gpu_count < 1 or not float(gpu_count).is_integer():
        return "fractional GPU"
    if math.isnan(on_demand) and math.isnan(spot):
        return "no price"
    return None


def count_of(provider: str, instance_type: str, upstream: float) -> float:
    """The GPU count, from ``instance_types.csv`` where the upstream count is known wrong."""
    facts = instance_facts().get((provider, instance_type))
    return float(facts.gpu_count) if facts is not None else upstream
