"""Accelerator specs: ``data/accelerators.csv`` → :class:`AcceleratorSpec` per part.

One row per part (``H100-SXM``, ``H100-PCIe``, …) with dense peak TFLOPS per precision; an empty
cell means the part has no native figure for that precision (see
:meth:`AcceleratorSpec.peak_tflops` for the fallbacks). Sparse figures are never stored.

Besides the GPU parts of the file, every catalog knows one built-in part, :data:`CPU_PART`
(``cpu``, accelerator name ``CPU``, spec :data:`CPU_SPEC` with no GPU figures): the part of every
CPU-only offer (``gpu_count`` 0) — the public clouds' CPU instances and the ``local`` provider's
``local-cpu`` alike.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from gpulease.catalog._tables import DATA_DIR, number, read_rows
from gpulease.catalog.types import PRECISION_FALLBACKS, AcceleratorSpec
from gpulease.errors import CatalogError

PRECISIONS: tuple[str, ...] = tuple(PRECISION_FALLBACKS)

CPU_PART = "cpu"
CPU_NAME = "CPU"
CPU_SPEC = AcceleratorSpec(
    part=CPU_PART,
    name=CPU_NAME,
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
    release_year=0,
    source="built in: the host's CPUs, no accelerator",
    notes="the part of CPU-only offers (gpu_count 0); no GPU figures",
)


def _spec(row: dict[str, str]) -> AcceleratorSpec:
    tflops = {p: number(row[p]) for p in PRECISIONS}
    tdp = number(row["tdp_w"])
    notes = row["notes"]
    matrix = number(row["fp64_matrix"])
    if not math.isnan(matrix):
        notes = f"FP64 matrix (tensor) peak {matrix:g}. {notes}".strip()
    return AcceleratorSpec(
        part=row["part"],
        name=row["name"],
        vendor=row["vendor"],
        architecture=row["architecture"],
        generation=row["generation"],
        form_factor=row["form_factor"],
        memory_gb=float(row["memory_gb"]),
        memory_bandwidth_gbps=float(row["memory_bandwidth_gbps"]),
        tflops={p: v for p, v in tflops.items() if not math.isnan(v)},
        interconnect=row["interconnect"],
        intra_node_gbps=float(row["intra_node_gbps"]),
        tdp_w=None if math.isnan(tdp) else tdp,
        release_year=int(row["release_year"]),
        source=f"{row['source']} ({row['source_date']})",
        confidence=row["confidence"],
        notes=notes,
    )


def read_specs(path: Path) -> dict[str, AcceleratorSpec]:
    """The specs in ``path`` by part."""
    specs: dict[str, AcceleratorSpec] = {}
    for line, row in enumerate(read_rows(path), start=2):
        try:
            spec = _spec(row)
        except (KeyError, ValueError) as exc:
            raise CatalogError(f"{path}:{line}: bad accelerator row: {exc}") from None
        specs[spec.part] = spec
    return specs


@functools.cache
def bundled_specs() -> dict[str, AcceleratorSpec]:
    """The bundled accelerator specs and the built-in :data:`CPU_PART` (cached for the
    process)."""
    return {**read_specs(DATA_DIR / "accelerators.csv"), CPU_PART: CPU_SPEC}
