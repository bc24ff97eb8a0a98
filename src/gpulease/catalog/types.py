"""Types of the catalog: accelerator specs and the columnar offer table.

CONTRACT (read by estimate, policy, optimizer and the CLI — keep names and types stable).

Offers are held column-wise (one numpy array per column) so that the optimizer filters and prices
tens of thousands of offers without building an object per offer. :meth:`OfferTable.row` builds a
single :class:`Offer` for display.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

Precision = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"]


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

        fp8 → bf16/fp16 → fp32 when unsupported; tf32 → fp32; bf16 on parts without bf16 (Volta,
        Turing) → fp16 figure is NOT used (bf16 is emulated there), fp32 is.
        """
        ...
        raise NotImplementedError


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


@dataclass(slots=True)
class OfferTable:
    """Offers, one numpy array per column, all of equal length. Missing prices are NaN;
    a missing zone is ""; a missing interruption band is -1; certifications are ";"-joined."""

    provider: npt.NDArray[np.str_]
    region: npt.NDArray[np.str_]
    zone: npt.NDArray[np.str_]
    instance_type: npt.NDArray[np.str_]
    accelerator: npt.NDArray[np.str_]
    part: npt.NDArray[np.str_]
    gpu_count: npt.NDArray[np.int64]
    gpu_memory_gb: npt.NDArray[np.float64]
    vcpus: npt.NDArray[np.float64]
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

    def __len__(self) -> int:
        return int(self.provider.shape[0])

    def row(self, i: int) -> Offer:
        ...
        raise NotImplementedError

    def take(self, index: npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> OfferTable:
        """A new table of the rows selected by a mask or an index array."""
        ...
        raise NotImplementedError
