"""What a checkpoint store costs to keep: the config's ``cost:`` section, parsed and checked.

::

    cost:
      storage_usd_per_gb_month: {s3: 0.023, local: 0}   # or one number for every scheme
      storage_measure_every: 1h                           # how often each store's bytes are counted

Defaults (:data:`DEFAULT_USD_PER_GB_MONTH`): ``s3`` $0.023 per GB-month — AWS S3 Standard, first
50 TB per month, us-east-1, from https://aws.amazon.com/s3/pricing/ (read 2026-12-01); ``local``
$0 (the server's own disk). A store URL's scheme picks its price (a plain path is ``local``).
``storage_measure_every`` is a duration (``30m``, ``1h``, ``45s``; a plain number is hours, as
in task files), default one hour. A bad value raises
:class:`~gpulease.errors.UserInputError` naming the key (the server exits 2). Moves no states.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gpulease.errors import UserInputError
from gpulease.units import parse_duration_hours, parse_money

KEY = "cost"
PRICE_KEY = "storage_usd_per_gb_month"
EVERY_KEY = "storage_measure_every"
SCHEMES = ("s3", "local")
#: $/GB-month per store scheme. s3: AWS S3 Standard, first 50 TB/month, us-east-1,
#: https://aws.amazon.com/s3/pricing/ (read 2026-12-01); local: the server's own disk.
DEFAULT_USD_PER_GB_MONTH: Mapping[str, float] = MappingProxyType({"s3": 0.023, "local": 0.0})
DEFAULT_MEASURE_EVERY_S = 3600.0


def scheme_of(url: str) -> str:
    """``s3`` for ``s3://…``, ``local`` for ``local://…`` or a plain path; else the scheme."""
    if "://" not in url:
        return "local"
    return url.split("://", 1)[0]


@dataclass(frozen=True, slots=True)
class StoragePricing:
    """$/GB-month per scheme and the seconds between two measurements of one store."""

    usd_per_gb_month: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_USD_PER_GB_MONTH)
    )
    measure_every_s: float = DEFAULT_MEASURE_EVERY_S

    def price_of(self, url: str) -> float:
        """$/GB-month of the store at ``url`` (0 for a scheme without a price)."""
        return self.usd_per_gb_month.get(scheme_of(url), 0.0)

    @property
    def bills_anything(self) -> bool:
        return any(v > 0 for v in self.usd_per_gb_month.values())


def storage_pricing(config: Mapping[str, Any]) -> StoragePricing:
    """The ``cost:`` section of the config file, checked (defaults when absent)."""
    section = config.get(KEY)
    section = {} if section is None else section
    if not isinstance(section, Mapping):
        raise UserInputError(
            f"{KEY}: must be a mapping ({PRICE_KEY}: {{s3: 0.023}}, {EVERY_KEY}: 1h)"
        )
    unknown = sorted(str(k) for k in set(section) - {PRICE_KEY, EVERY_KEY})
    if unknown:
        raise UserInputError(f"{KEY}.{unknown[0]}: unknown key (known: {PRICE_KEY}, {EVERY_KEY})")
    prices = _prices(section.get(PRICE_KEY))
    every = section.get(EVERY_KEY)
    return StoragePricing(prices, DEFAULT_MEASURE_EVERY_S if every is None else _every(every))


def _prices(value: object) -> dict[str, float]:
    where = f"{KEY}.{PRICE_KEY}"
    prices = dict(DEFAULT_USD_PER_GB_MONTH)
    if value is None:
        return prices
    if not isinstance(value, Mapping):
        number = _price(value, where)
        return dict.fromkeys(SCHEMES, number)
    for scheme, price in value.items():
        if scheme not in SCHEMES:
            raise UserInputError(
                f"{where}.{scheme}: unknown store scheme (known: {', '.join(SCHEMES)})"
            )
        prices[scheme] = _price(price, f"{where}.{scheme}")
    return prices


def _price(value: object, where: str) -> float:
    try:
        return parse_money(value)
    except ValueError as exc:
        raise UserInputError(f"{where}: $/GB-month such as 0.023: {exc}") from None


def _every(value: object) -> float:
    where = f"{KEY}.{EVERY_KEY}"
    try:
        seconds = parse_duration_hours(value) * 3600.0
    except ValueError as exc:
        raise UserInputError(f"{where}: {exc}") from None
    if not 0 < seconds < math.inf:
        raise UserInputError(f"{where}: a duration longer than 0 (30m, 1h), not {value!r}")
    return seconds
