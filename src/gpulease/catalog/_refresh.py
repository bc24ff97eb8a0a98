"""The refreshed-catalog cache: write it from gpuhunt or SkyPilot catalogs, clear it.

The cache is ``<gpulease home>/catalog/offers.csv`` (same schema as the bundled snapshot) plus
``meta.json`` (when, from what, which providers, what was skipped). A refresh replaces the rows of
the providers it read and keeps the bundled rows of every other provider, so a partial refresh
never loses coverage. Both files are written atomically (temp file, fsync, rename); a refresh that
yields no offers raises :class:`CatalogError` and leaves the cache as it was.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from gpulease.atomic import write_json_atomic
from gpulease.catalog import _catalog, _gpuhunt, _skypilot
from gpulease.catalog._convert import Converted
from gpulease.catalog._offers_csv import OFFERS_SCHEMA, read_offers, table_from_rows, write_offers
from gpulease.catalog._paths import cache_dir, cache_path
from gpulease.catalog.types import OfferTable
from gpulease.errors import CatalogError

log = logging.getLogger(__name__)


def meta_path() -> Path:
    return cache_dir() / "meta.json"


def cache_info() -> dict[str, Any] | None:
    """What the last refresh recorded (``meta.json``), or None when there is no cache."""
    if not cache_path().exists():
        return None
    try:
        data: dict[str, Any] = json.loads(meta_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"source": "unknown (meta.json missing or unreadable)"}
    return data


def clear_cache() -> bool:
    """Remove the refreshed catalog; True when there was one. The bundled snapshot stays."""
    removed = False
    for path in (cache_path(), meta_path()):
        if path.exists():
            path.unlink()
            removed = True
    _catalog._LOADED.clear()
    return removed


def write_table(table: OfferTable, meta: dict[str, Any]) -> Path:
    """Write ``table`` as the cache and ``meta`` as ``meta.json`` (with the ``offers_schema``
    version of the columns written), each atomically."""
    write_offers(cache_path(), table)
    write_json_atomic(meta_path(), {**meta, "offers_schema": OFFERS_SCHEMA}, indent=2)
    _catalog._LOADED.clear()
    return cache_path()


def _write_cache(new: Converted, refreshed: set[str], source: str, today: date) -> Path:
    if not any(row["gpu_count"] for row in new.rows):  # CPU-only rows alone are no refresh
        reasons = ", ".join(f"{r} ({n})" for r, n in new.skipped.most_common(5)) or "no rows"
        raise CatalogError(f"{source}: no usable GPU offers found ({reasons}); cache unchanged")
    bundled = read_offers(_catalog.BUNDLED_OFFERS)
    kept = bundled.take(~np.isin(bundled.provider, sorted(refreshed)))
    table = OfferTable.concat([kept, table_from_rows(new.rows)])
    skipped = Counter({k: v for k, v in new.skipped.items() if not k.startswith("no accelerator")})
    meta = {
        "refreshed": today.isoformat(),
        "source": source,
        "providers_refreshed": sorted(refreshed),
        "providers_from_bundled": sorted(set(kept.provider.tolist())),
        "offers": len(table),
        "skipped": dict(skipped.most_common()),
    }
    write_table(table, meta)
    if skipped:
        log.info("catalog refresh skipped %d offers: %s", sum(skipped.values()), dict(skipped))
    return cache_path()


def update_from_gpuhunt(
    providers: Iterable[str] | None = None,
    *,
    source_dir: str | Path | None = None,
    today: date | None = None,
) -> Path:
    """Refresh the cache from gpuhunt: live (needs the ``gpuhunt`` package and the internet) or,
    with ``source_dir``, from a folder of gpuhunt ``<provider>.csv`` files. ``providers`` are our
    ids or gpuhunt's (``lambda``/``lambdalabs``); None means all. Returns the cache path."""
    today = today or date.today()
    wanted = list(providers) if providers is not None else None
    if source_dir is not None:
        directory = Path(source_dir)
        items = _gpuhunt.read_dir(directory, wanted)
        source = f"gpuhunt files {directory.resolve()}"
    else:
        items = _gpuhunt.fetch_live(wanted)
        source = "gpuhunt live catalog"
    converted = _gpuhunt.convert(items, as_of=today.isoformat(), source=source)
    refreshed = {provider for provider, _ in items}
    return _write_cache(converted, refreshed, source, today)


def import_skypilot(directory: str | Path, *, today: date | None = None) -> Path:
    """Refresh the cache from a SkyPilot catalog folder (``DIR/<cloud>/vms.csv``, e.g.
    ``~/.sky/catalogs/v8``). Returns the cache path."""
    today = today or date.today()
    root = Path(directory)
    files = sorted(root.glob("*/vms.csv"))
    if not files:
        raise CatalogError(f"{root}: no SkyPilot catalog files (expected <cloud>/vms.csv)")
    converted = Converted()
    refreshed = set()
    for path in files:
        provider = _skypilot.provider_of(path.parent.name)
        source = _skypilot.source_of(path, f"skypilot catalog {path.resolve()}")
        part = _skypilot.convert_file(path, provider, as_of=today.isoformat(), source=source)
        converted.extend(part)
        refreshed.add(provider)
    return _write_cache(converted, refreshed, f"skypilot catalog {root.resolve()}", today)
