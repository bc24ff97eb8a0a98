r"""Run-time offers: the building blocks a provider uses to say what it sells besides the public
catalog (the providers' own :meth:`~gpulease.providers.base.SupportsOffers.offers` build them;
``gpulease.providers.registry.runtime_catalog`` merges them into the catalog the server and the
in-process ``gpulease plan`` both plan over).

Owns :func:`offer_row` (one offer as a row of the columnar table, with this machine's defaults,
its CPU architecture included: :func:`host_cpu_arch`),
:func:`offer_table` (rows → :class:`OfferTable`), :func:`power_of_two_counts` (the GPU counts one
node shape is sold in) and the CPU-only part :data:`LOCAL_CPU_PART` with its spec
:data:`CPU_SPEC` — the catalog's built-in ``cpu`` part (no GPU figures), which the public
clouds' CPU instances use too (:mod:`gpulease.catalog._specs`).
"""

from __future__ import annotations

import os
import platform
from datetime import date
from typing import Any

import numpy as np

from gpulease.catalog._arch import X86_64, normalise
from gpulease.catalog._specs import CPU_PART, CPU_SPEC
from gpulease.catalog.types import COLUMNS, OfferTable

#: The part of the ``local`` provider's CPU-only offer: the catalog's built-in CPU part.
LOCAL_CPU_PART = CPU_PART
__all__ = [
    "CPU_SPEC",
    "LOCAL_CPU_PART",
    "host_cpu_arch",
    "offer_row",
    "offer_table",
    "power_of_two_counts",
    "ram_gb",
]


def ram_gb() -> float:
    """This machine's memory in GB (NaN where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError):
        return float("nan")


def host_cpu_arch(machine: str | None = None) -> str:
    """This machine's CPU architecture as an offer states it (``platform.machine()``:
    ``x86_64``/``AMD64`` → x86_64, ``aarch64``/``arm64`` → arm64, another name lower-cased;
    x86_64 when the OS does not say)."""
    return normalise(platform.machine() if machine is None else machine) or X86_64


def offer_row(
    provider: str, instance_type: str, *, accelerator: str, part: str, gpus: int = 0,
    memory: float = 0.0, **values: Any,
) -> dict[str, Any]:  # fmt: skip
    """One on-demand offer; ``values`` override the defaults (this machine's vCPUs, RAM and CPU
    architecture, region ``local``, price 0, no spot, today)."""
    row: dict[str, Any] = {
        "provider": provider, "region": "local", "zone": "", "instance_type": instance_type,
        "accelerator": accelerator, "part": part, "gpu_count": gpus, "gpu_memory_gb": memory,
        "vcpus": float(os.cpu_count() or 1), "cpu_arch": host_cpu_arch(), "ram_gb": ram_gb(),
        "nvme_gb": float("nan"), "network_gbps": float("nan"), "fabric": "", "price_on_demand": 0.0,
        "price_spot": float("nan"), "price_reserved_1y": float("nan"),
        "price_reserved_3y": float("nan"), "interruption_band": -1, "certifications": "",
        "as_of": date.today().isoformat(), "source": "local machine",
    }  # fmt: skip
    unknown = set(values) - set(row)
    if unknown:
        raise ValueError(f"not offer columns: {sorted(unknown)}")
    return {**row, **values}


def offer_table(rows: list[dict[str, Any]]) -> OfferTable:
    columns: dict[str, np.ndarray[Any, Any]] = {
        n: np.array([r[n] for r in rows], dtype=k) for n, k in COLUMNS.items()
    }
    return OfferTable.from_columns(columns)


def power_of_two_counts(gpus: int) -> list[int]:
    """The GPU counts a node with ``gpus`` GPUs is sold in: powers of two below it, and itself."""
    return [c for c in (1, 2, 4, 8, 16, 32) if c < gpus] + ([gpus] if gpus else [])
