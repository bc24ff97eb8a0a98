"""Live AWS figures (boto3) merged into the cached catalog: ``gpulease catalog update -p aws``.

Per region, with its own EC2 client (``AWS_ENDPOINT_URL`` is honoured by boto3):

- ``DescribeInstanceTypes`` (paginated): vCPUs, memory (MiB → GB), ``GpuInfo`` (GPU name,
  count, memory per GPU) and ``ProcessorInfo.SupportedArchitectures`` (→ ``cpu_arch``: arm64
  when it lists ``arm64``, x86_64 when it lists ``x86_64``) of every GPU type. They fill
  vCPUs/RAM/architecture of the offers; GPU count and memory come from them unless
  ``instance_types.csv`` (the curated authority) has the type, and a disagreement is counted in
  ``meta.json``. A GPU type the catalog lacks is added when its GPU
  resolves to a known accelerator (:func:`gpulease.catalog._names.resolve`).
- ``DescribeSpotPriceHistory`` (``Linux/UNIX``, ``StartTime`` now, paginated) for those types:
  the newest price per (instance type, availability zone) becomes that zone's offer (zone names
  become zone IDs through ``DescribeAvailabilityZones``, as in the snapshot).
- On-demand prices stay as they were (snapshot or gpuhunt). The Pricing API gives the
  reserved columns (:mod:`._aws_reserved`) when the credentials allow ``pricing:GetProducts``;
  otherwise a note says so and the reserved columns stay.
- Interruption bands come from the public Spot Advisor data (:mod:`._spot_advisor`) when it can
  be read; otherwise the rows keep their bands and one warning says so.

Every row of a queried region built from the API carries ``source = "aws-api"`` and
``as_of = today``; rows of other regions and providers are untouched. Everything is fetched
before anything is written; the cache is written atomically as by :mod:`._refresh`.

Errors: missing credentials or a refused permission → :class:`UserInputError` (exit 2);
an unreachable endpoint or another API error → :class:`CatalogError`; throttling is retried
with :func:`gpulease.backoff.retry` (bounded).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from gpulease.backoff import retry
from gpulease.catalog import _catalog, _spot_advisor
from gpulease.catalog._paths import cache_path
from gpulease.catalog._tables import instance_facts
from gpulease.catalog.types import OfferTable
from gpulease.clock import Clock
from gpulease.errors import CatalogError, Retryable, UserInputError

SOURCE = "aws-api"
PROVIDER = "aws"
#: Regions queried when none are given: the catalog's AWS regions with the most GPU offers.
DEFAULT_REGION_CAP = 5
RETRY_ATTEMPTS = 5
_THROTTLING = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException",
     "RequestThrottled", "SlowDown"}
)  # fmt: skip
_DENIED = frozenset(
    {"AuthFailure", "UnauthorizedOperation", "AccessDenied", "AccessDeniedException",
     "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "RequestExpired",
     "OptInRequired", "UnrecognizedClientException", "InvalidAccessKeyId"}
)  # fmt: skip

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SpotQuote:
    """One DescribeSpotPriceHistory record."""

    instance_type: str
    zone: str
    price: float
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """What DescribeInstanceTypes says about a GPU instance type."""

    instance_type: str
    vcpus: float
    ram_gb: float
    gpu_name: str
    gpu_manufacturer: str
    gpu_count: int
    gpu_memory_gb: float  # per GPU
    cpu_arch: str = ""  # "x86_64" | "arm64" | "" (not stated)


def processor_arch(item: Mapping[str, Any]) -> str:
    """``arm64``/``x86_64`` from ``ProcessorInfo.SupportedArchitectures`` ("" when absent);
    ``x86_64_mac``/``arm64_mac`` (Mac hosts) count as their CPU."""
    listed = (item.get("ProcessorInfo") or {}).get("SupportedArchitectures") or []
    names = {str(a).removesuffix("_mac") for a in listed}
    if "arm64" in names:
        return "arm64"
    return "x86_64" if "x86_64" in names else ""


@dataclass
class RegionData:
    """Everything read from one region."""

    region: str
    infos: dict[str, InstanceInfo] = field(default_factory=dict)
    quotes: list[SpotQuote] = field(default_factory=list)
    zone_ids: dict[str, str] = field(default_factory=dict)


@dataclass
class AwsUpdate:
    """What ``update_from_aws`` did: the cache path, regions, rows written and warnings."""

    path: Path
    regions: list[str]
    rows: int
    warnings: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)  # e.g. reserved prices not read


# -- pure helpers ---------------------------------------------------------------------------------


def newest_quotes(quotes: Iterable[SpotQuote]) -> dict[tuple[str, str], SpotQuote]:
    """Per (instance type, zone), the record with the newest timestamp."""
    best: dict[tuple[str, str], SpotQuote] = {}
    for quote in quotes:
        key = (quote.instance_type, quote.zone)
        current = best.get(key)
        if current is None or quote.timestamp > current.timestamp:
            best[key] = quote
    return best


def instance_info(item: Mapping[str, Any]) -> InstanceInfo | None:
    """An :class:`InstanceInfo` from one DescribeInstanceTypes entry (None without GPUs)."""
    gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
    if not gpus:
        return None
    gpu = gpus[0]
    memory_mib = (gpu.get("MemoryInfo") or {}).get("SizeInMiB")
    return InstanceInfo(
        instance_type=str(item["InstanceType"]),
        vcpus=float((item.get("VCpuInfo") or {}).get("DefaultVCpus", math.nan)),
        ram_gb=float((item.get("MemoryInfo") or {}).get("SizeInMiB", math.nan)) / 1024,
        gpu_name=str(gpu.get("Name", "")),
        gpu_manufacturer=str(gpu.get("Manufacturer", "")),
        gpu_count=sum(int(g.get("Count", 0)) for g in gpus),
        gpu_memory_gb=float(memory_mib) / 1024 if memory_mib else math.nan,
        cpu_arch=processor_arch(item),
    )


def spot_quote(item: Mapping[str, Any]) -> SpotQuote | None:
    """A :class:`SpotQuote` from one DescribeSpotPriceHistory record (None when malformed)."""
    try:
        return SpotQuote(
            instance_type=str(item["InstanceType"]),
            zone=str(item["AvailabilityZone"]),
            price=float(item["SpotPrice"]),
            timestamp=item["Timestamp"],
        )
    except (KeyError, TypeError, ValueError):
        return None


def default_regions(offers: OfferTable, cap: int = DEFAULT_REGION_CAP) -> tuple[list[str], int]:
    """The catalog's AWS regions with the most GPU offers (at most ``cap``), and how many it
    has (CPU-only offers do not count: every region lists the same few CPU families)."""
    aws = (offers.provider == PROVIDER) & (offers.gpu_count > 0)
    counts = Counter(str(r) for r in offers.region[aws])
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    return ranked[:cap], len(ranked)


# -- AWS calls ------------------------------------------------------------------------------------


def classify(exc: Exception, region: str) -> Exception:
    """The gpulease error for a boto3/botocore failure (``Retryable`` for throttling)."""
    from botocore import exceptions as bx

    where = f"AWS EC2 in {region}"
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return UserInputError(
            f"{where}: no AWS credentials found ({exc}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE; catalog unchanged"
        )
    if isinstance(exc, bx.ClientError):
        return _client_error(exc.response.get("Error", {}), where)
    if isinstance(exc, bx.BotoCoreError):
        unreachable = bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError
        what = "cannot reach the endpoint" if isinstance(exc, unreachable) else "failed"
        return CatalogError(f"{where}: {what} ({exc}); catalog unchanged")
    return exc


def _client_error(error: Mapping[str, Any], where: str) -> Exception:
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    if code in _THROTTLING:
        return Retryable(f"{where}: throttled ({code}); catalog unchanged", delay=1.0)
    if code in _DENIED:
        return UserInputError(
            f"{where}: permission denied ({code}: {message}); the credentials need "
            "ec2:DescribeInstanceTypes, ec2:DescribeSpotPriceHistory and "
            "ec2:DescribeAvailabilityZones; catalog unchanged"
        )
    return CatalogError(f"{where}: {code or 'error'}: {message}; catalog unchanged")


def _call(fn: Callable[[], T], region: str, clock: Clock | None) -> T:
    """``fn()``, with AWS failures classified and throttling retried (bounded)."""
    from botocore.exceptions import BotoCoreError, ClientError

    def attempt() -> T:
        try:
            return fn()
        except (BotoCoreError, ClientError) as exc:
            raise classify(exc, region) from None

    return retry(attempt, attempts=RETRY_ATTEMPTS, base=0.5, cap=8.0, clock=clock)


def _client(region: str) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise CatalogError(
            "live AWS prices need boto3: pip install 'gpulease[aws]'; catalog unchanged"
        ) from None
    config = Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 1})
    make: Any = boto3.client
    return make("ec2", region_name=region, config=config)


def _pages(
    client: Any, operation: str, region: str, clock: Clock | None, **kwargs: Any
) -> list[Any]:
    paginator = client.get_paginator(operation)
    return _call(lambda: list(paginator.paginate(**kwargs)), region, clock)


def fetch_region(
    region: str, known_types: set[str], *, now: datetime, clock: Clock | None = None
) -> RegionData:
    """Instance facts, spot quotes and zone IDs of ``region`` (GPU types only)."""
    client = _client(region)
    data = RegionData(region)
    for page in _pages(client, "describe_instance_types", region, clock):
        for item in page.get("InstanceTypes", []):
            info = instance_info(item)
            if info is not None:
                data.infos[info.instance_type] = info
    zones = _call(client.describe_availability_zones, region, clock)
    data.zone_ids = {
        z["ZoneName"]: z.get("ZoneId", z["ZoneName"]) for z in zones["AvailabilityZones"]
    }
    wanted = sorted(known_types | set(data.infos))
    for start in range(0, len(wanted), 100):
        pages = _pages(
            client, "describe_spot_price_history", region, clock,
            ProductDescriptions=["Linux/UNIX"], StartTime=now,
            InstanceTypes=wanted[start : start + 100],
        )  # fmt: skip
        for page in pages:
            quotes = (spot_quote(q) for q in page.get("SpotPriceHistory", []))
            data.quotes.extend(q for q in quotes if q is not None)
    return data


# -- the update -----------------------------------------------------------------------------------


def _regions(asked: Iterable[str] | None, offers: OfferTable, warnings: list[str]) -> list[str]:
    wanted = list(dict.fromkeys(r.strip() for r in asked or () if r.strip()))
    if wanted:
        return wanted
    wanted, total = default_regions(offers)
    if not wanted:
        raise UserInputError("the catalog has no AWS regions: pass --region REGION")
    if total > len(wanted):
        warnings.append(
            f"queried the {len(wanted)} AWS regions with the most offers ({', '.join(wanted)}) "
            f"of {total}; pass --region for others"
        )
    return wanted


def _known_types(offers: OfferTable) -> set[str]:
    listed = {str(t) for t in offers.instance_type[offers.provider == PROVIDER]}
    return listed | {t for p, t in instance_facts() if p == PROVIDER}


def _meta(table: OfferTable, regions: list[str], update: AwsUpdate, today: date) -> dict[str, Any]:
    from gpulease.catalog._refresh import cache_info

    previous = cache_info() or {}
    refreshed = set(previous.get("providers_refreshed") or []) | {PROVIDER}
    providers = {str(p) for p in np.unique(table.provider)}
    return {
        "refreshed": today.isoformat(),
        "source": f"{SOURCE} (regions {', '.join(regions)})",
        "providers_refreshed": sorted(refreshed),
        "providers_from_bundled": sorted(providers - refreshed),
        "offers": len(table),
        "aws_live": {
            "regions": regions,
            "rows": update.rows,
            "events": dict(update.stats.most_common()),
            "warnings": update.warnings,
            "notes": update.notes,
        },
    }


def update_from_aws(
    regions: Iterable[str] | None = None,
    *,
    today: date | None = None,
    clock: Clock | None = None,
    advisor_url: str | None = None,
) -> AwsUpdate:
    """Merge live AWS spot prices, instance facts and Spot Advisor bands into the cache.

    ``regions`` default to the catalog's :data:`DEFAULT_REGION_CAP` AWS regions with the most
    offers (a warning says so). Returns what was done; warnings are for the user to see."""
    from gpulease.catalog import _aws_merge, _aws_reserved, _refresh

    now = datetime.now(UTC)
    today = today or now.date()
    current = _catalog.Catalog.load().offers
    warnings: list[str] = []
    wanted = _regions(regions, current, warnings)
    known = _known_types(current)
    data = {region: fetch_region(region, known, now=now, clock=clock) for region in wanted}
    bands, why = _spot_advisor.fetch(advisor_url)
    if bands is None:
        warnings.append(f"{why}; kept the catalog's interruption bands")
    types = known.union(*(d.infos for d in data.values()))
    rates, unread = _aws_reserved.fetch(wanted, types, clock=clock)
    merged = _aws_merge.merge(current, data, bands, as_of=today.isoformat())
    if merged.stats["rows"] == 0:
        raise CatalogError(f"{SOURCE}: no AWS GPU offers in {', '.join(wanted)}; catalog unchanged")
    table, priced = _aws_reserved.apply(merged.table, rates)
    merged.stats["rows with reserved prices"] = priced
    update = AwsUpdate(cache_path(), wanted, merged.stats["rows"], warnings, merged.stats)
    update.notes.extend([unread] if unread else [])
    _refresh.write_table(table, _meta(table, wanted, update, today))
    return update
