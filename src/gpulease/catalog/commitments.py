"""Committed prices: the user's negotiated discounts (config ``pricing.discounts``) and the
published committed-use discounts of the clouds (``data/commitments.csv``, facts with sources).

Owns no state. The offers' own ``price_reserved_1y/3y`` columns (filled by
``catalog update --provider aws`` from the AWS Pricing API, :mod:`._aws_reserved`) are the
published per-offer prices; a user's discount for a provider (and optionally regions) replaces
them with ``on-demand × (1 − off)`` on that provider's offers, because the user's contract is
what the user pays. :func:`reserved_prices` returns the column and which rows are the user's.

Config::

    pricing:
      discounts:
        - provider: aws          # a provider id (required)
          commitment: 1y         # 1y | 3y (required)
          discount: 0.30         # fraction off on-demand, 0 < d < 1 ("30%" also accepted)
          regions: [us-*]        # optional fnmatch patterns; default every region
          note: "MSA 2026-03"    # optional, shown in plans

Published discounts (``commitments.csv``) are facts, not prices: most clouds publish only a
ceiling ("up to 57 %"), which is never applied to an offer; see docs/cost-tco.md.
"""

from __future__ import annotations

import csv
import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

from gpulease.catalog.types import OfferTable
from gpulease.errors import UserInputError

COMMITMENTS = ("1y", "3y")
_FIELDS = frozenset({"provider", "commitment", "discount", "regions", "note"})
#: ``off`` is an alias of ``discount``; YAML 1.1 (PyYAML) reads a bare ``off:`` key as False.
_ALIASES = ("off", False)
_WHERE = "config pricing.discounts"


@dataclass(frozen=True, slots=True)
class Discount:
    """A user's negotiated discount off on-demand under a commitment term."""

    provider: str
    commitment: str  # "1y" | "3y"
    off: float  # fraction, 0 < off < 1
    regions: tuple[str, ...] = ()  # fnmatch patterns; () = every region
    note: str = ""

    def covers(self, provider: str, region: str) -> bool:
        """Whether this discount applies to an offer of ``provider`` in ``region``."""
        if provider != self.provider:
            return False
        return not self.regions or any(fnmatch.fnmatchcase(region, p) for p in self.regions)

    def describe(self) -> str:
        """How a plan names the figure: the user's, with the term and the discount."""
        where = f" in {', '.join(self.regions)}" if self.regions else ""
        note = f" ({self.note})" if self.note else ""
        return (
            f"your negotiated price: {self.off * 100:g}% off {self.provider} on-demand{where} "
            f"under your {self.commitment} commitment{note}, from {_WHERE}"
        )


@dataclass(frozen=True, slots=True)
class PublishedDiscount:
    """One published committed-use discount (a row of ``commitments.csv``)."""

    provider: str
    commitment: str
    off: float
    kind: str  # "flat": the discount on every eligible offer; "ceiling": "up to"
    scope: str
    source_url: str
    source_date: str
    notes: str


def parse_off(value: Any, where: str) -> float:
    """A discount fraction from ``0.3`` or ``"30%"``; 0 < off < 1, else :class:`UserInputError`."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1]) / 100
        except ValueError:
            number = math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        number = math.nan
    if not (math.isfinite(number) and 0 < number < 1):
        raise UserInputError(
            f"{where}: must be a fraction between 0 and 1 (0.30) or a percentage "
            f"('30%'), got {value!r}"
        )
    return number


def _discount(item: Any, i: int) -> Discount:
    where = f"{_WHERE}[{i}]"
    if not isinstance(item, Mapping):
        raise UserInputError(f"{where}: must be a mapping with provider, commitment and discount")
    item = _unaliased(item, where)
    unknown = sorted(set(map(str, item)) - _FIELDS)
    if unknown:
        raise UserInputError(f"{where}: unknown field(s) {', '.join(unknown)}")
    provider = item.get("provider")
    if not isinstance(provider, str) or not provider.strip():
        raise UserInputError(f"{where}.provider: a provider id is required (aws, gcp, ...)")
    commitment = str(item.get("commitment", "")).strip().lower()
    if commitment not in COMMITMENTS:
        got = item.get("commitment")
        raise UserInputError(f"{where}.commitment: must be 1y or 3y, got {got!r}")
    regions = item.get("regions", [])
    if isinstance(regions, str):
        regions = [regions]
    if not isinstance(regions, list) or not all(isinstance(r, str) and r for r in regions):
        raise UserInputError(f"{where}.regions: a list of region names or patterns")
    return Discount(
        provider=provider.strip().lower(),
        commitment=commitment,
        off=parse_off(item.get("discount"), f"{where}.discount"),
        regions=tuple(regions),
        note=str(item.get("note", "") or ""),
    )


def _unaliased(item: Mapping[Any, Any], where: str) -> dict[Any, Any]:
    out = dict(item)
    given = [key for key in _ALIASES if key in out and out[key] is not None]
    if given and "discount" in out:
        raise UserInputError(f"{where}: give discount once (off is the same field)")
    for key in _ALIASES:
        if key in out:
            out["discount"] = out.pop(key)
    return out


def discounts_from_config(config: Mapping[str, Any] | None) -> tuple[Discount, ...]:
    """The validated ``pricing.discounts`` of a parsed config (``()`` when absent)."""
    section = (config or {}).get("pricing")
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise UserInputError("config pricing: must be a mapping (with discounts: [...])")
    unknown = sorted(set(map(str, section)) - {"discounts"})
    if unknown:
        raise UserInputError(f"config pricing: unknown field(s) {', '.join(unknown)}")
    items = section.get("discounts") or []
    if not isinstance(items, list):
        raise UserInputError(f"{_WHERE}: must be a list of discounts")
    found = tuple(_discount(item, i) for i, item in enumerate(items))
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    for d in found:
        key = (d.provider, d.commitment, d.regions)
        if key in seen:
            raise UserInputError(
                f"{_WHERE}: two discounts for {d.provider} {d.commitment}"
                f"{' in ' + ', '.join(d.regions) if d.regions else ''}"
            )
        seen.add(key)
    return found


def discount_for(
    discounts: Iterable[Discount], provider: str, region: str, commitment: str
) -> Discount | None:
    """The discount that prices an offer: the last listed that covers it (a later, narrower
    entry overrides an earlier, wider one)."""
    hit = None
    for d in discounts:
        if d.commitment == commitment and d.covers(provider, region):
            hit = d
    return hit


def reserved_prices(
    offers: OfferTable, commitment: str, discounts: Iterable[Discount]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """The committed $/h of every offer for ``commitment`` (NaN: none) and which rows carry the
    user's figure: the catalog's reserved column, replaced by ``on-demand × (1 − off)`` on the
    offers a discount covers."""
    column = offers.price_reserved_3y if commitment == "3y" else offers.price_reserved_1y
    prices = np.array(column, dtype=np.float64, copy=True)
    user = np.zeros(len(offers), dtype=bool)
    for d in discounts:
        if d.commitment != commitment:
            continue
        hit = offers.provider == d.provider
        if d.regions and hit.any():
            regions = np.unique(offers.region[hit])
            wanted = [str(r) for r in regions if d.covers(d.provider, str(r))]
            hit &= np.isin(offers.region, wanted)
        prices[hit] = offers.price_on_demand[hit] * (1.0 - d.off)
        user[hit] = True
    return prices, user


@cache
def published_discounts() -> tuple[PublishedDiscount, ...]:
    """The rows of ``data/commitments.csv`` (published committed-use discounts, with sources)."""
    text = resources.files("gpulease.catalog").joinpath("data/commitments.csv").read_text("utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return tuple(
        PublishedDiscount(
            provider=r["provider"],
            commitment=r["commitment"],
            off=float(r["off"]),
            kind=r["kind"],
            scope=r["scope"],
            source_url=r["source_url"],
            source_date=r["source_date"],
            notes=r["notes"],
        )
        for r in rows
    )
