"""AWS Spot Instance Advisor data → interruption bands per (region, instance type).

The advisor publishes one JSON document (:data:`SPOT_ADVISOR_URL`, overridable with the
``GPULEASE_SPOT_ADVISOR_URL`` environment variable)::

    {"ranges": [{"index": 0, "label": "<5%", ...}, ...],
     "spot_advisor": {"us-east-1": {"Linux": {"p4d.24xlarge": {"r": 4, "s": 70}, ...}, ...}}}

``r`` indexes ``ranges``; its label (``<5%``, ``5-10%``, ``10-15%``, ``15-20%``, ``>20%``) maps to
our band 0..4 (:data:`BAND_LABELS`). ``s`` is the saving against on-demand in percent (unused
here). Only the ``Linux`` figures are read. Malformed entries are skipped, never fatal: the
document is someone else's and a refresh must not fail because of one odd value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SPOT_ADVISOR_URL = "https://spot-bulk-advisor.s3.amazonaws.com/spot-advisor-data.json"
URL_ENV = "GPULEASE_SPOT_ADVISOR_URL"
TIMEOUT_S = 5.0
#: Our interruption band per Spot Advisor range label (the band is the label's position).
BAND_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
_OS = "Linux"

Bands = dict[tuple[str, str], int]


def advisor_url() -> str:
    """The Spot Advisor URL: ``$GPULEASE_SPOT_ADVISOR_URL`` or the public one."""
    return os.environ.get(URL_ENV) or SPOT_ADVISOR_URL


def _label_key(label: str) -> str:
    return label.replace(" ", "").lower()


def _range_bands(ranges: object) -> dict[int, int]:
    """``ranges`` index → our band, for entries whose label we know."""
    known = {_label_key(label): band for band, label in enumerate(BAND_LABELS)}
    out: dict[int, int] = {}
    if not isinstance(ranges, list):
        return out
    for entry in ranges:
        if not isinstance(entry, Mapping):
            continue
        index, label = entry.get("index"), entry.get("label")
        if isinstance(index, int) and not isinstance(index, bool) and isinstance(label, str):
            band = known.get(_label_key(label))
            if band is not None:
                out[index] = band
    return out


def _region_bands(region: str, per_os: object, ranges: Mapping[int, int]) -> Bands:
    out: Bands = {}
    if not isinstance(per_os, Mapping):
        return out
    types = per_os.get(_OS)
    if not isinstance(types, Mapping):
        return out
    for instance_type, figures in types.items():
        if not isinstance(instance_type, str) or not isinstance(figures, Mapping):
            continue
        index = figures.get("r")
        if isinstance(index, int) and not isinstance(index, bool) and index in ranges:
            out[(region, instance_type)] = ranges[index]
    return out


def parse(document: object) -> Bands:
    """(region, instance type) → band 0..4 from a Spot Advisor document; malformed parts skip."""
    if not isinstance(document, Mapping):
        return {}
    ranges = _range_bands(document.get("ranges"))
    regions = document.get("spot_advisor")
    if not ranges or not isinstance(regions, Mapping):
        return {}
    out: Bands = {}
    for region, per_os in regions.items():
        if isinstance(region, str):
            out.update(_region_bands(region, per_os, ranges))
    return out


def fetch(url: str | None = None, *, timeout_s: float = TIMEOUT_S) -> tuple[Bands | None, str]:
    """The bands from the advisor, or (None, why) when it cannot be read. Never raises."""
    import httpx

    url = url or advisor_url()
    try:
        response = httpx.get(url, timeout=timeout_s, follow_redirects=True)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"Spot Advisor data not reachable at {url} ({type(exc).__name__}: {exc})"
    bands = parse(document)
    if not bands:
        return None, f"Spot Advisor data at {url} held no usable Linux bands"
    return bands, ""
