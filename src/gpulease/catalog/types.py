"""Types of the catalog: accelerator specs and the columnar offer table.

CONTRACT (read by estimate, policy, optimizer and the CLI — keep names and types stable).

Offers are held column-wise (one numpy array per column) so that the optimizer filters and prices
tens of thousands of offers without building an object per offer. :meth:`OfferTable.row` builds a
single :class:`Offer` for display.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Precision = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"]

#: For each precision, the modes tried in order by :meth:`AcceleratorSpec.peak_tflops`.
PRECISION_FALLBACKS: dict[str, tuple[str, ...]] = {
    "fp64": ("fp64",),
    "fp32": ("fp32",),
    "tf32": ("tf32", "fp32"),
    "bf16": ("bf16", "fp32"),
    "fp16": ("fp16", "fp32"),
    "fp8": ("fp8", "bf16", "fp32"),
    "int8": ("int8", "fp16", "fp32"),
}


@dataclass(frozen=True, slots=True)
class AcceleratorSpec:
    """One accelerator part (e.g. ``H100-SXM``), with dense peak figures per GPU.

    ``name`` is the canonical accelerator name offers use (``H100``); ``part`` identifies the exact
    part (``H100-SXM``, ``H100-PCIe``). ``tflops`` holds dense peaks per precision; a precision the
    part cannot run natively is absent. ``generation`` drives default utilisation (e.g. ``volta``,
    ``turing``, ``ampere``, ``ada``, ``hopper``, ``blackwell``, ``cdna2``, ``cdna3``, ``gaudi2``).
    ``intra_node_gbps`` is GPU-to-GPU bandwidth inside a node (NVLink or PCIe), GB/s per GPU.
    """

    part: str
    name: str
    vendor: str
    architecture: str
    generation: str
    form_factor: str
    memory_gb: float
    memory_bandwidth_gbps: float
    tflops: dict[str, float]
    interconnect: str
    intra_node_gbps: float
    tdp_w: float | None
    release_year: int
    source: str
    confidence: str = "high"
    notes: str = ""

    def peak_tflops(self, precision: str) -> float:
        """Dense peak for ``precision``, falling back to the nearest slower mode it supports.

        fp8 → bf16 → fp32 when unsupported; tf32 → fp32; bf16 on parts without bf16 (Volta,
        Turing) → fp16 figure is NOT used (bf16 is emulated there), fp32 is.

        The chains (first figure present wins) are in :data:`PRECISION_FALLBACKS`: fp8 → bf16 →
        fp32, int8 → fp16 → fp32, fp16 → fp32, tf32 → fp32. fp64 and fp32 have no slower mode;
        a part without that figure (fp64 on L4, fp32 on Gaudi2) returns 0.0, which callers read
        as "cannot run this precision usefully". Unknown precisions raise :class:`ValueError`.
        """
        chain = PRECISION_FALLBACKS.get(precision)
        if chain is None:
            known = ", ".join(PRECISION_FALLBACKS)
            raise ValueError(f"unknown precision {precision!r}; expected one of {known}")
        for mode in chain:
            value = self.tflops.get(mode)
            if value is not None and value > 0:
                return float(value)
        return 0.0


@dataclass(frozen=True, slots=True)
class Offer:
    """One offer row, for display and the SDK (not used on the optimizer's hot path)."""

    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    part: str
    gpu_count: int
    gpu_memory_gb: float
    vcpus: float
    ram_gb: float
    nvme_gb: float
    network_gbps: float
    fabric: str  # "efa" | "infiniband" | "ethernet" | "roce"
    price_on_demand: float | None
    price_spot: float | None
    price_reserved_1y: float | None
    price_reserved_3y: float | None
    interruption_band: int | None  # AWS Spot Advisor band 0..4 (<5%, 5-10, 10-15, 15-20, >20%)
    certifications: tuple[str, ...]
    as_of: str  # ISO date the figures were taken
    source: str
    cpu_arch: str = "x86_64"  # host CPU: "x86_64" | "arm64" (catalog/_arch.py)


@dataclass(slots=True)
class OfferTable:
    """Offers, one numpy array per column, all of equal length. Missing prices are NaN;
    a missing zone is ""; a missing interruption band is -1; certifications are ";"-joined.

    Unknown hardware figures are NaN too: ``vcpus``/``ram_gb`` (Vast lists placeholders),
    ``nvme_gb`` and ``network_gbps`` (not published with confidence for some instance types).
    Prices are per instance-hour; ``gpu_memory_gb`` is per GPU. ``cpu_arch`` is the host CPU
    architecture, ``x86_64`` or ``arm64`` (never empty; :mod:`gpulease.catalog._arch`)."""

    provider: npt.NDArray[np.str_]
    region: npt.NDArray[np.str_]
    zone: npt.NDArray[np.str_]
    instance_type: npt.NDArray[np.str_]
    accelerator: npt.NDArray[np.str_]
    part: npt.NDArray[np.str_]
    gpu_count: npt.NDArray[np.int64]
    gpu_memory_gb: npt.NDArray[np.float64]
    vcpus: npt.NDArray[np.float64]
    cpu_arch: npt.NDArray[np.str_]
    ram_gb: npt.NDArray[np.float64]
    nvme_gb: npt.NDArray[np.float64]
    network_gbps: npt.NDArray[np.float64]
    fabric: npt.NDArray[np.str_]
    price_on_demand: npt.NDArray[np.float64]
    price_spot: npt.NDArray[np.float64]
    price_reserved_1y: npt.NDArray[np.float64]
    price_reserved_3y: npt.NDArray[np.float64]
    interruption_band: npt.NDArray[np.int64]
    certifications: npt.NDArray[np.str_]
    as_of: npt.NDArray[np.str_]
    source: npt.NDArray[np.str_]
    extra: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    _codes: dict[str, tuple[np.ndarray, npt.NDArray[np.intp]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __len__(self) -> int:
        return int(self.provider.shape[0])

    def codes(self, name: str) -> tuple[np.ndarray, npt.NDArray[np.intp]]:
        """(distinct values, index of each row's value) of column ``name``, computed once per
        table: sorting tens of thousands of strings is the slow part of grouping."""
        cached = self._codes.get(name)
        if cached is None:
            uniques, inverse = np.unique(getattr(self, name), return_inverse=True)
            cached = (uniques, inverse.astype(np.intp))
            self._codes[name] = cached
        return cached

    def row(self, i: int) -> Offer:
        """Offer ``i`` as an object (NaN prices and band -1 become None, "" zone becomes None)."""
        band = int(self.interruption_band[i])
        certs = str(self.certifications[i])
        return Offer(
            provider=str(self.provider[i]),
            region=str(self.region[i]),
            zone=str(self.zone[i]) or None,
            instance_type=str(self.instance_type[i]),
            accelerator=str(self.accelerator[i]),
            part=str(self.part[i]),
            gpu_count=int(self.gpu_count[i]),
            gpu_memory_gb=float(self.gpu_memory_gb[i]),
            vcpus=float(self.vcpus[i]),
            ram_gb=float(self.ram_gb[i]),
            nvme_gb=float(self.nvme_gb[i]),
            network_gbps=float(self.network_gbps[i]),
            fabric=str(self.fabric[i]),
            price_on_demand=_price(self.price_on_demand[i]),
            price_spot=_price(self.price_spot[i]),
            price_reserved_1y=_price(self.price_reserved_1y[i]),
            price_reserved_3y=_price(self.price_reserved_3y[i]),
            interruption_band=band if band >= 0 else None,
            certifications=tuple(c for c in certs.split(";") if c),
            as_of=str(self.as_of[i]),
            source=str(self.source[i]),
            cpu_arch=str(self.cpu_arch[i]),
        )

    def rows(self) -> list[Offer]:
        """Every offer as an object (for display; the optimizer stays columnar)."""
        return [self.row(i) for i in range(len(self))]

    def take(self, index: npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> OfferTable:
        """A new table of the rows selected by a mask or an index array."""
        columns = {name: getattr(self, name)[index] for name in COLUMNS}
        extra = {name: values[index] for name, values in self.extra.items()}
        return OfferTable.from_columns(columns, extra)

    def column_dict(self) -> dict[str, np.ndarray]:
        """The columns by name, in :data:`COLUMNS` order (``extra`` not included)."""
        return {name: getattr(self, name) for name in COLUMNS}

    @staticmethod
    def concat(tables: list[OfferTable]) -> OfferTable:
        """The rows of ``tables`` one after the other (``extra`` kept only where all have it)."""
        if not tables:
            return OfferTable.empty()
        columns = {name: np.concatenate([getattr(t, name) for t in tables]) for name in COLUMNS}
        shared = set.intersection(*(set(t.extra) for t in tables))
        extra = {name: np.concatenate([t.extra[name] for t in tables]) for name in sorted(shared)}
        return OfferTable.from_columns(columns, extra)

    @staticmethod
    def empty() -> OfferTable:
        """A table with no rows."""
        return OfferTable.from_columns(
            {name: np.array([], dtype=kind) for name, kind in COLUMNS.items()}
        )

    @staticmethod
    def from_columns(
        columns: Mapping[str, np.ndarray],
        extra: Mapping[str, npt.NDArray[np.float64]] | None = None,
    ) -> OfferTable:
        """A table from arrays named as in :data:`COLUMNS` (all of them, equal lengths)."""
        missing = [name for name in COLUMNS if name not in columns]
        if missing:
            raise ValueError(f"missing offer columns: {', '.join(missing)}")
        lengths = {len(columns[name]) for name in COLUMNS}
        if len(lengths) > 1:
            raise ValueError(f"offer columns differ in length: {sorted(lengths)}")
        kwargs: dict[str, Any] = {name: columns[name] for name in COLUMNS}
        return OfferTable(**kwargs, extra=dict(extra or {}))


def _price(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


#: The columns of :class:`OfferTable` (and of ``offers.csv``) with their numpy kinds.
COLUMNS: dict[str, type] = {
    "provider": np.str_,
    "region": np.str_,
    "zone": np.str_,
    "instance_type": np.str_,
    "accelerator": np.str_,
    "part": np.str_,
    "gpu_count": np.int64,
    "gpu_memory_gb": np.float64,
    "vcpus": np.float64,
    "cpu_arch": np.str_,
    "ram_gb": np.float64,
    "nvme_gb": np.float64,
    "network_gbps": np.float64,
    "fabric": np.str_,
    "price_on_demand": np.float64,
    "price_spot": np.float64,
    "price_reserved_1y": np.float64,
    "price_reserved_3y": np.float64,
    "interruption_band": np.int64,
    "certifications": np.str_,
    "as_of": np.str_,
    "source": np.str_,
}
