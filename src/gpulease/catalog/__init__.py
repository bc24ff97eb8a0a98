"""The catalog: what accelerators exist, who rents them where, and at what price.

Owns accelerator specs (dense peak TFLOPS per precision, memory, interconnect) and offers
(provider, region, zone, instance type, part, GPUs, prices on-demand/spot/reserved, AWS spot
interruption band, certifications, as-of date, source), held column-wise in an
:class:`~gpulease.catalog.types.OfferTable`. A dated snapshot ships in ``catalog/data/``; a
refreshed cache (``update_from_gpuhunt``, ``import_skypilot``) under the gpulease home wins over
it. See ``docs/catalog.md``.

::

    from gpulease.catalog import Catalog
    catalog = Catalog.load()
    catalog.query("H100", spot=True, regions=["eu-*"])[:3]
    catalog.spec_for("H100-SXM").peak_tflops("bf16")   # 989.4
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulease.catalog._catalog import Catalog, GpuSummary
from gpulease.catalog._tables import RegionInfo
from gpulease.catalog.types import (
    PRECISION_FALLBACKS,
    AcceleratorSpec,
    Offer,
    OfferTable,
    Precision,
)

if TYPE_CHECKING:
    from gpulease.catalog._paths import cache_path
    from gpulease.catalog._refresh import (
        cache_info,
        clear_cache,
        import_skypilot,
        update_from_gpuhunt,
    )

_REFRESH = {"cache_info", "cache_path", "clear_cache", "import_skypilot", "update_from_gpuhunt"}


def __getattr__(name: str) -> Any:
    """Refresh and import load on first use: planning never needs them."""
    if name == "cache_path":
        from gpulease.catalog._paths import cache_path

        return cache_path
    if name in _REFRESH:
        from gpulease.catalog import _refresh

        return getattr(_refresh, name)
    raise AttributeError(f"module 'gpulease.catalog' has no attribute {name!r}")


__all__ = [
    "PRECISION_FALLBACKS",
    "AcceleratorSpec",
    "Catalog",
    "GpuSummary",
    "Offer",
    "OfferTable",
    "Precision",
    "RegionInfo",
    "cache_info",
    "cache_path",
    "clear_cache",
    "import_skypilot",
    "update_from_gpuhunt",
]
