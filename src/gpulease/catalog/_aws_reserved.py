"""Reserved prices from the AWS Pricing API (``pricing:GetProducts``), for
``gpulease catalog update --provider aws``: the ``price_reserved_1y/3y`` columns of AWS offers.

One Pricing client (``us-east-1``, the API's endpoint region; ``AWS_ENDPOINT_URL_PRICING`` or
``AWS_ENDPOINT_URL`` are honoured by boto3) asks, per region, for ``AmazonEC2`` products with
``operatingSystem=Linux``, ``tenancy=Shared``, ``preInstalledSw=NA``, ``capacitystatus=Used``
and the ``regionCode`` (paginated). Each ``PriceList`` entry is a JSON document: ``product.
attributes`` (``instanceType``, ``regionCode``) and ``terms.Reserved`` (per offer term:
``termAttributes`` ``LeaseContractLength`` 1yr/3yr, ``OfferingClass`` standard/convertible,
``PurchaseOption`` No/Partial/All Upfront; ``priceDimensions`` with ``unit`` ``Hrs`` (hourly)
and ``Quantity`` (the upfront fee), ``pricePerUnit.USD``).

The price kept per (region, type, term) is the lowest **effective hourly rate** (hourly + upfront
÷ the term's hours, 8,760 per year) among the **standard** offering class's purchase options.
Reading these is optional: a denied permission or an unreachable API leaves the reserved columns
as they were and the update says so (:func:`fetch` returns the reason).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from gpulease.catalog.types import OfferTable
from gpulease.clock import Clock
from gpulease.errors import GpuleaseError

TERM_HOURS = {"1yr": 8760.0, "3yr": 3 * 8760.0}
COLUMN = {"1yr": "price_reserved_1y", "3yr": "price_reserved_3y"}
PRICING_REGION = "us-east-1"
_FILTERS = {"operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
            "capacitystatus": "Used"}  # fmt: skip

Key = tuple[str, str, str]  # (region, instance type, "1yr" | "3yr")


def _usd(dimension: Mapping[str, Any]) -> float:
    try:
        return float((dimension.get("pricePerUnit") or {}).get("USD", "nan"))
    except (TypeError, ValueError):
        return math.nan


def effective_rate(term: Mapping[str, Any]) -> tuple[str, float] | None:
    """(``1yr``/``3yr``, effective $/h) of one standard reserved offer term, else None."""
    attrs = term.get("termAttributes") or {}
    length = str(attrs.get("LeaseContractLength", ""))
    if length not in TERM_HOURS or str(attrs.get("OfferingClass", "")).lower() != "standard":
        return None
    hourly, upfront = 0.0, 0.0
    for dim in (term.get("priceDimensions") or {}).values():
        unit, value = str(dim.get("unit", "")), _usd(dim)
        if not math.isfinite(value) or value < 0:
            return None
        if unit == "Hrs":
            hourly += value
        elif unit == "Quantity":
            upfront += value
    rate = hourly + upfront / TERM_HOURS[length]
    return (length, rate) if rate > 0 else None


def reserved_rates(price_list: Iterable[str | Mapping[str, Any]]) -> dict[Key, float]:
    """Per (region, instance type, term), the lowest effective standard reserved rate in the
    ``PriceList`` entries (JSON strings as the API returns them, or parsed); malformed entries
    are skipped."""
    best: dict[Key, float] = {}
    for entry in price_list:
        try:
            doc = json.loads(entry) if isinstance(entry, str) else entry
            attrs = doc["product"]["attributes"]
            region, instance_type = str(attrs["regionCode"]), str(attrs["instanceType"])
            terms = (doc.get("terms") or {}).get("Reserved") or {}
        except (KeyError, TypeError, ValueError):
            continue
        for term in terms.values() if isinstance(terms, Mapping) else ():
            found = effective_rate(term) if isinstance(term, Mapping) else None
            if found is None:
                continue
            key = (region, instance_type, found[0])
            best[key] = min(best.get(key, math.inf), found[1])
    return best


def apply(table: OfferTable, rates: Mapping[Key, float]) -> tuple[OfferTable, int]:
    """``table`` with the AWS rows' reserved columns set from ``rates``, and how many rows got
    a price. Rows without a rate keep theirs."""
    if not rates:
        return table, 0
    columns = table.column_dict()
    aws = np.flatnonzero(table.provider == "aws")
    out = {name: np.array(values, copy=True) for name, values in columns.items()}
    hits = 0
    for i in aws.tolist():
        region, instance_type = str(table.region[i]), str(table.instance_type[i])
        hit = False
        for length, column in COLUMN.items():
            rate = rates.get((region, instance_type, length))
            if rate is not None:
                out[column][i] = rate
                hit = True
        hits += hit
    return OfferTable.from_columns(out, table.extra), hits


def _client() -> Any:
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 1})
    make: Any = boto3.client
    return make("pricing", region_name=PRICING_REGION, config=config)


def _pager(client: Any, filters: list[dict[str, str]]) -> Callable[[], list[Any]]:
    def pages() -> list[Any]:
        paginator = client.get_paginator("get_products")
        return list(paginator.paginate(ServiceCode="AmazonEC2", Filters=filters))

    return pages


def fetch(
    regions: Iterable[str], instance_types: set[str], *, clock: Clock | None = None
) -> tuple[dict[Key, float], str]:
    """The reserved rates of ``instance_types`` in ``regions``, and "" — or ``({}, reason)``
    when the Pricing API cannot be read (never raises for AWS failures)."""
    from botocore.exceptions import BotoCoreError

    from gpulease.catalog._aws_live import _call

    try:
        client = _client()
        rates: dict[Key, float] = {}
        for region in regions:
            filters = [{"Type": "TERM_MATCH", "Field": k, "Value": v}
                       for k, v in {**_FILTERS, "regionCode": region}.items()]  # fmt: skip
            pages = _call(_pager(client, filters), f"the AWS Pricing API ({region})", clock)
            for page in pages:
                for key, rate in reserved_rates(page.get("PriceList", [])).items():
                    if key[1] in instance_types:
                        rates[key] = rate
        return rates, ""
    except (GpuleaseError, BotoCoreError) as exc:
        return {}, f"reserved prices not read ({exc}); they need pricing:GetProducts"
