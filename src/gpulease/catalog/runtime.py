r"""Run-time offers: what the providers of this install sell besides the public catalog.

The ``local`` provider sells this machine: one offer per shape — CPU only (``local-cpu``, a part
of its own with no GPU figures) and, when the config gives the machine fake GPUs
(``providers.local.gpus: N``, ``providers.local.accelerator: T4``), one per power-of-two GPU count
up to N — at price 0, region ``local``, with this machine's vCPUs and RAM. The ``sim`` provider
(configured by a ``providers.sim`` section) sells the catalog's own offers under its name.

``gpulease plan`` (in process) and the server's ``launch`` both plan over
:func:`catalog_for`\ (:func:`configured_providers`), so they see the same offers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import date
from typing import Any

import numpy as np

from gpulease.catalog._catalog import Catalog
from gpulease.catalog.types import COLUMNS, AcceleratorSpec, OfferTable
from gpulease.errors import UserInputError


def configured_providers(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings per provider this install runs: ``local`` always, ``sim`` and ``aws`` when the
    config file has a ``providers.sim`` / ``providers.aws`` section (even an empty one)."""
    section = dict(config.get("providers") or {})
    settings = {"local": dict(section.get("local") or {})}
    for name in ("sim", "aws"):
        if name in section:
            settings[name] = dict(section.get(name) or {})
    return settings


LOCAL_CPU_PART = "local-cpu"
_CPU_SPEC = AcceleratorSpec(
    part=LOCAL_CPU_PART,
    name="CPU",
    vendor="none",
    architecture="cpu",
    generation="cpu",
    form_factor="host",
    memory_gb=0.0,
    memory_bandwidth_gbps=0.0,
    tflops={},
    interconnect="none",
    intra_node_gbps=0.0,
    tdp_w=None,
    release_year=date.today().year,
    source="local machine",
)


def _ram_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        return float("nan")


def _offer(
    instance_type: str, accelerator: str, part: str, gpus: int, memory: float
) -> dict[str, Any]:
    return {
        "provider": "local", "region": "local", "zone": "", "instance_type": instance_type,
        "accelerator": accelerator, "part": part, "gpu_count": gpus, "gpu_memory_gb": memory,
        "vcpus": float(os.cpu_count() or 1), "ram_gb": _ram_gb(), "nvme_gb": float("nan"),
        "network_gbps": float("nan"), "fabric": "", "price_on_demand": 0.0,
        "price_spot": float("nan"), "price_reserved_1y": float("nan"),
        "price_reserved_3y": float("nan"), "interruption_band": -1, "certifications": "",
        "as_of": date.today().isoformat(), "source": "local machine",
    }  # fmt: skip


def local_offers(catalog: Catalog, settings: Mapping[str, Any]) -> OfferTable:
    """The local provider's offers for ``settings`` (the config's ``providers.local``)."""
    rows = [_offer("local-cpu", "CPU", LOCAL_CPU_PART, 0, 0.0)]
    gpus = int(settings.get("gpus") or 0)
    if gpus > 0:
        name = str(settings.get("accelerator") or "T4")
        parts = catalog.parts_of(name)
        if not parts:
            raise UserInputError(f"providers.local.accelerator: unknown accelerator {name!r}")
        spec = parts[0]
        count = 1
        while count <= gpus:
            rows.append(_offer(f"local-{spec.name}x{count}", spec.name, spec.part, count,
                               spec.memory_gb))  # fmt: skip
            count *= 2
    columns: dict[str, np.ndarray[Any, Any]] = {
        n: np.array([r[n] for r in rows], dtype=k) for n, k in COLUMNS.items()
    }
    return OfferTable.from_columns(columns)


def sim_offers(catalog: Catalog) -> OfferTable:
    """The sim provider sells the catalog's offers — same regions, zones, shapes, prices and
    interruption bands — under the provider name ``sim``."""
    columns = catalog.offers.column_dict()
    columns["provider"] = np.full(len(catalog.offers), "sim")
    columns["source"] = np.char.add("sim of ", catalog.offers.source.astype(str))
    return OfferTable.from_columns(columns)


def catalog_for(providers: Mapping[str, Mapping[str, Any]]) -> Catalog:
    """The catalog with the run-time offers of the configured providers."""
    base = Catalog.load()
    catalog = base
    if "sim" in providers:
        catalog = catalog.with_offers(sim_offers(base), label="sim")
    if "local" in providers:
        catalog = catalog.with_offers(
            local_offers(base, providers["local"]),
            label="local",
            specs={LOCAL_CPU_PART: _CPU_SPEC},
        )
    return catalog
