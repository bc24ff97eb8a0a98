"""gpuhunt offers (live, or ``<provider>.csv`` files in gpuhunt's format) → our schema.

gpuhunt (dstack's price catalog) writes one CSV per provider with the columns of its
``RawCatalogItem``: ``instance_name, location, price, cpu, memory, gpu_count, gpu_name,
gpu_memory, spot`` (newer versions add ``gpu_vendor, disk_size, flags, …``; unknown columns are
ignored). Each row is either the on-demand or the spot price of one instance in one location, so
rows are paired by (provider, instance, location) into one offer. GCP locations are zones
(``us-central1-a``) and become region + zone. GPU names map to our parts with
:func:`gpulease.catalog._names.resolve`; unknown GPUs are skipped and counted. Rows without a
GPU are CPU offers when the type is one of the families :mod:`gpulease.catalog._cpu` keeps
(the bundled snapshot's rule), else skipped.

The live path imports :mod:`gpuhunt` lazily (optional extra ``gpulease[gpuhunt]``) and needs the
internet; both failures raise :class:`CatalogError` with what to do.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpulease.catalog import _cpu
from gpulease.catalog._convert import Converted, count_of, offer_row, price, skip_reason
from gpulease.catalog._names import resolve
from gpulease.catalog._tables import read_rows
from gpulease.errors import CatalogError

#: gpuhunt provider name → our provider id (others keep their gpuhunt name).
GPUHUNT_PROVIDERS = {"lambdalabs": "lambda", "vastai": "vast"}
_REQUIRED = ("instance_name", "location", "price", "gpu_count", "gpu_name", "spot")
_GCP_ZONE = re.compile(r"^([a-z]+-[a-z]+\d+)-[a-z]$")

Item = tuple[str, Mapping[str, object]]  # (our provider id, gpuhunt fields)


def our_provider(name: str) -> str:
    return GPUHUNT_PROVIDERS.get(name.lower(), name.lower())


def gpuhunt_provider(name: str) -> str:
    wanted = name.lower()
    return next((g for g, ours in GPUHUNT_PROVIDERS.items() if ours == wanted), wanted)


def read_dir(directory: Path, providers: Iterable[str] | None = None) -> list[Item]:
    """Items from the ``<provider>.csv`` files in ``directory`` (gpuhunt's offline format)."""
    if not directory.is_dir():
        raise CatalogError(f"{directory}: not a folder of gpuhunt CSV files")
    wanted = {our_provider(p) for p in providers} if providers is not None else None
    files = [
        f
        for f in sorted(directory.glob("*.csv"))
        if wanted is None or our_provider(f.stem) in wanted
    ]
    if not files:
        raise CatalogError(f"{directory}: no gpuhunt <provider>.csv files for the providers asked")
    items: list[Item] = []
    for path in files:
        rows = list(read_rows(path))
        missing = [c for c in _REQUIRED if rows and c not in rows[0]]
        if missing:
            raise CatalogError(f"{path}: not a gpuhunt catalog file (missing {', '.join(missing)})")
        items.extend((our_provider(path.stem), row) for row in rows)
    return items


def fetch_live(providers: Iterable[str] | None = None) -> list[Item]:
    """Items from the gpuhunt package's published catalog (needs the internet)."""
    try:
        import gpuhunt
    except ImportError:
        raise CatalogError(
            "live refresh needs the gpuhunt package: "
            "pip install 'gpulease[gpuhunt]' (or pass a folder of gpuhunt CSV "
            "files)"
        ) from None
    names = [gpuhunt_provider(p) for p in providers] if providers is not None else None
    try:
        found = gpuhunt.query(provider=names)
    except Exception as exc:  # network errors, S3 outages, unknown providers: all one outcome
        raise CatalogError(f"gpuhunt could not fetch its catalog (offline?): {exc}") from None
    fields = (*_REQUIRED, "cpu", "memory", "gpu_memory", "cpu_arch")
    return [
        (our_provider(str(i.provider)), {f: getattr(i, f, None) for f in fields}) for i in found
    ]


def _text(value: object) -> str:
    return "" if value is None else str(value).strip()


def _number(value: object) -> float:
    text = _text(value)
    return float(text) if text else math.nan


def _is_spot(value: object) -> bool:
    return value is True or _text(value).lower() == "true"


def _location(provider: str, location: str) -> tuple[str, str]:
    match = _GCP_ZONE.match(location) if provider == "gcp" else None
    return (match.group(1), location) if match else (location, "")


@dataclass
class _Pair:
    item: Mapping[str, object]
    on_demand: float = math.nan
    spot: float = math.nan

    def add(self, is_spot: bool, value: float) -> None:
        old = self.spot if is_spot else self.on_demand
        new = value if math.isnan(old) else min(old, value)
        if is_spot:
            self.spot = new
        else:
            self.on_demand = new


def _cpu_item(
    out: Converted,
    provider: str,
    instance: str,
    location: str,
    pair: _Pair,
    *,
    as_of: str,
    source: str,
) -> None:
    if not _cpu.is_cpu_instance(provider, instance):
        out.skipped[_cpu.SKIPPED] += 1
        return
    region, zone = _location(provider, location)
    _cpu.append_cpu_offer(
        out,
        provider=provider,
        region=region,
        zone=zone,
        instance_type=instance,
        vcpus=_number(pair.item.get("cpu")),
        ram_gb=_number(pair.item.get("memory")),
        on_demand=pair.on_demand,
        spot=pair.spot,
        as_of=as_of,
        source=source,
        cpu_arch=pair.item.get("cpu_arch") or "",
    )


def convert(items: Iterable[Item], *, as_of: str, source: str) -> Converted:
    """Offers from gpuhunt items (on-demand and spot rows of one instance paired)."""
    groups: dict[tuple[str, str, str], _Pair] = {}
    for provider, row in items:
        key = (provider, _text(row.get("instance_name")), _text(row.get("location")))
        groups.setdefault(key, _Pair(row)).add(_is_spot(row.get("spot")), price(row.get("price")))
    out = Converted()
    for (provider, instance, location), pair in groups.items():
        item = pair.item
        name = _text(item.get("gpu_name"))
        upstream = _number(item.get("gpu_count"))
        if not name or not upstream > 0:
            _cpu_item(out, provider, instance, location, pair, as_of=as_of, source=source)
            continue
        memory = _number(item.get("gpu_memory"))
        count = count_of(provider, instance, upstream)
        resolved = resolve(provider, instance, name, memory_gb=memory)
        on_demand, spot = pair.on_demand, pair.spot
        reason = skip_reason(resolved, count, on_demand, spot)
        if reason is not None or resolved is None:
            out.skipped[f"{reason}: {name}"] += 1
            continue
        region, zone = _location(provider, location)
        out.rows.append(
            offer_row(
                provider=provider,
                region=region,
                zone=zone,
                instance_type=instance,
                resolved=resolved,
                gpu_count=int(count),
                vcpus=_number(item.get("cpu")),
                ram_gb=_number(item.get("memory")),
                on_demand=on_demand,
                spot=spot,
                as_of=as_of,
                source=source,
                memory_gb=memory,
                cpu_arch=item.get("cpu_arch") or "",
            )
        )
    return out
