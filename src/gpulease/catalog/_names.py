"""Upstream GPU names → our canonical accelerator name and exact part.

Price lists name GPUs loosely (``A100 80G``, ``H100-MEGA``, ``RTXA6000``, ``H100_NVL``, ``T4g``).
:func:`resolve` turns (provider, instance type, upstream name, GPU memory, free-text hints) into a
:class:`Resolved` (canonical name such as ``A100-80GB``, part such as ``A100-SXM4-80GB``):

1. a known instance type (``instance_types.csv``) decides the part outright;
2. otherwise the name (after normalisation and aliases) gives the canonical name, refined by the
   per-GPU memory (an ``A100`` with 80 GB is an ``A100-80GB``);
3. the form factor comes from hints in the names (``NVLINK``/``SXM``/``MEGA`` → SXM, ``NVL`` →
   NVL, ``PCIE`` → PCIe), else from a per-provider default (RunPod's bare names are PCIe), else
   from the most common cloud form (SXM) — then ``assumed`` is set so the row can say so.

A name with no spec (consumer cards, TPUs, fractional vGPUs) resolves to ``None``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpulease.catalog._specs import bundled_specs
from gpulease.catalog._tables import instance_facts
from gpulease.catalog.types import AcceleratorSpec

#: Normalised upstream name → canonical accelerator name.
_ALIASES: dict[str, str] = {
    "K80": "K80",
    "P100": "P100",
    "V100": "V100",
    "V10016GB": "V100",
    "V10032GB": "V100-32GB",
    "V10032G": "V100-32GB",
    "T4": "T4",
    "T4G": "T4",
    "A10": "A10",
    "A10G": "A10G",
    "A30": "A30",
    "A40": "A40",
    "L4": "L4",
    "L40S": "L40S",
    "A100": "A100",
    "A10040GB": "A100",
    "A100SXM4": "A100",
    "A100PCIE": "A100",
    "A10080GB": "A100-80GB",
    "A10080G": "A100-80GB",
    "A10080GBSXM": "A100-80GB",
    "A100SXM480GB": "A100-80GB",
    "A100PCIE80GB": "A100-80GB",
    "H100": "H100",
    "H100SXM": "H100",
    "H100SXM5": "H100",
    "H10080GB": "H100",
    "H100MEGA": "H100",
    "H100NVL": "H100",
    "H100NVLINK": "H100",
    "H100PCIE": "H100",
    "H200": "H200",
    "H200SXM": "H200",
    "H200NVL": "H200",
    "GH200": "GH200",
    "B200": "B200",
    "MI250X": "MI250X",
    "MI300X": "MI300X",
    "GAUDI2": "Gaudi2",
    "HL225": "Gaudi2",
    "A6000": "A6000",
    "RTXA6000": "A6000",
    "RTX6000ADA": "RTX6000-Ada",
    "RTX6000ADAGENERATION": "RTX6000-Ada",
    # export parts sold in China, and newer ones
    "H800": "H800",
    "H800SXM": "H800",
    "H800SXM5": "H800",
    "H80080GB": "H800",
    "H800PCIE": "H800",
    "H20": "H20",
    "A800": "A800",
    "A800SXM4": "A800",
    "A80080GB": "A800",
    "A800SXM480GB": "A800",
    "A800PCIE": "A800",
    "A800PCIE80GB": "A800",
    "L20": "L20",
    "L2048GB": "L20",
    "GB200": "GB200",
    "MI325X": "MI325X",
    "GAUDI3": "Gaudi3",
    "HL325L": "Gaudi3",
    "RTX4090": "RTX4090",
    "GEFORCERTX4090": "RTX4090",
    "4090": "RTX4090",
    "RTX5090": "RTX5090",
    "GEFORCERTX5090": "RTX5090",
    "5090": "RTX5090",
}

#: A family name (what :data:`_ALIASES` gives) → its part in each form factor. A part's own
#: canonical name is its spec's ``name``: ``H100`` is the SXM part, ``H100-PCIe`` and
#: ``H100-NVL`` are names of their own (``A100`` and ``V100`` keep one name per memory size).
_SXM = {
    "H800": "H800-SXM",
    "A800": "A800-SXM4-80GB",
    "V100": "V100-SXM2-16GB",
    "V100-32GB": "V100-SXM2-32GB",
    "A100": "A100-SXM4-40GB",
    "A100-80GB": "A100-SXM4-80GB",
    "H100": "H100-SXM",
    "H200": "H200-SXM",
    "P100": "P100-SXM2-16GB",
}
_PCIE = {
    "V100": "V100-PCIe-16GB",
    "A100": "A100-PCIe-40GB",
    "A100-80GB": "A100-PCIe-80GB",
    "H100": "H100-PCIe",
    "H800": "H800-PCIe",
    "A800": "A800-PCIe-80GB",
    "P100": "P100-PCIe-16GB",
}
_NVL = {"H100": "H100-NVL", "H200": "H200-NVL"}
#: The part a bare name means when nothing says otherwise (the usual cloud form).
_DEFAULT = {**_SXM, "P100": "P100-PCIe-16GB"}
#: Providers whose bare names mean a different form (RunPod: ``A100-80GB`` is PCIe, the SXM
#: version is ``A100-80GB-SXM``).
_PROVIDER_DEFAULT = {"runpod": _PCIE}
#: Parts no cloud rents any more; offers naming them are dropped.
RETIRED = frozenset({"K80"})


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    part: str
    assumed: bool = False  # the form factor was not stated upstream


def normalise(raw: str) -> str:
    text = raw.upper().replace("NVIDIA", "").replace("TESLA", "")
    return re.sub(r"[^A-Z0-9]", "", text)


def canonical_name(raw: str, memory_gb: float | None = None) -> str | None:
    """The family name for an upstream name (None when we have no spec): ``H100 NVL`` →
    ``H100``, whose form factor :func:`resolve` then decides."""
    name = _ALIASES.get(normalise(raw))
    if name is None or memory_gb is None or math.isnan(memory_gb):
        return name
    if name == "A100" and memory_gb >= 60:
        return "A100-80GB"
    if name == "V100" and memory_gb >= 30:
        return "V100-32GB"
    return name


def _form(text: str, name: str, memory_gb: float | None) -> str | None:
    if "NVLINK" in text or "SXM" in text or "MEGA" in text or "HGX" in text:
        return _SXM.get(name)
    if "NVL" in text or (name == "H100" and memory_gb is not None and memory_gb >= 90):
        return _NVL.get(name)
    if "PCIE" in text:
        return _PCIE.get(name)
    return None


def resolve(
    provider: str,
    instance_type: str,
    raw_name: str,
    *,
    memory_gb: float | None = None,
    hint: str = "",
) -> Resolved | None:
    """The canonical name and part of an offer's GPU, or None when it has no spec."""
    specs = bundled_specs()
    facts = instance_facts().get((provider, instance_type))
    if facts is not None:
        return Resolved(specs[facts.part].name, facts.part)
    name = canonical_name(raw_name, memory_gb)
    if name is None:
        return None
    parts = _family_parts(name, specs)
    if len(parts) == 1:
        return Resolved(specs[parts[0]].name, parts[0])
    text = f"{instance_type} {raw_name} {hint}".upper().replace("_", "-")
    part = _form(text, name, memory_gb)
    if part is not None:
        return Resolved(specs[part].name, part)
    default = _PROVIDER_DEFAULT.get(provider, {}).get(name) or _DEFAULT.get(name, parts[0])
    return Resolved(specs[default].name, default, assumed=True)


def _family_parts(family: str, specs: dict[str, AcceleratorSpec]) -> list[str]:
    """The parts a family name may mean: those named so, and its forms in the tables above."""
    forms = {table[family] for table in (_SXM, _PCIE, _NVL) if family in table}
    named = {part for part, spec in specs.items() if spec.name == family}
    return sorted(p for p in forms | named if p in specs)
