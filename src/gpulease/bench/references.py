"""The bench's fixed references: the datasheet (the catalog's bundled spec of the part the node
should have: dense peak TFLOPS per dtype, memory bandwidth, GPU-to-GPU bandwidth) and published
per-GPU training throughputs (``data/published.csv``: each row with its source and date, as for
the catalog). History and peers are the other references (:mod:`gpulease.bench.judge`).
"""

from __future__ import annotations

import csv
import functools
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from gpulease.catalog._specs import CPU_PART, bundled_specs
from gpulease.catalog.types import AcceleratorSpec

PUBLISHED_CSV = Path(__file__).parent / "data" / "published.csv"
PUBLISHED_COLUMNS = ("accelerator", "check", "figure", "unit", "precision", "batch", "source_url",
                     "source_date", "notes")  # fmt: skip


def _gpu_specs() -> list[AcceleratorSpec]:
    return [s for s in bundled_specs().values() if s.part != CPU_PART]


def parts_named(name: str) -> list[AcceleratorSpec]:
    """The parts sold as ``name`` (``H100`` → SXM, PCIe, NVL), or the part itself; any case."""
    wanted = name.strip().lower().replace("_", "-")
    specs = _gpu_specs()
    by_name = [s for s in specs if s.name.lower() == wanted]
    return sorted(by_name or [s for s in specs if s.part.lower() == wanted], key=lambda s: s.part)


def _tokens(text: str) -> set[str]:
    """Lower-case words of ``text`` split at spaces, ``-`` and ``_``, with each adjacent pair
    joined too (``RTX 6000 Ada`` → rtx, 6000, ada, rtx6000, 6000ada)."""
    words = [w for w in re.split(r"[\s_-]+", text.lower()) if w]
    return set(words) | {a + b for a, b in itertools.pairwise(words)}


def parts_seen(gpu_name: str) -> list[AcceleratorSpec]:
    """The parts the name NVML reports points at: those whose part's words all appear in it
    (``NVIDIA A100-SXM4-80GB`` → A100-SXM4-80GB), the most specific only; else those whose
    accelerator name's words do (``NVIDIA H100 80GB HBM3`` → the parts named H100)."""
    seen = _tokens(gpu_name)
    for by_name in (False, True):
        found = [(words, s) for s in _gpu_specs()
                 if (words := _tokens(s.name if by_name else s.part)) <= seen]  # fmt: skip
        if found:
            most = max(len(words) for words, _s in found)
            return sorted((s for words, s in found if len(words) == most), key=lambda s: s.part)
    return []


def spec_for(
    accelerator: str | None, gpu_name: str | None = None, interconnect: str | None = None
) -> tuple[AcceleratorSpec | None, str]:
    """The datasheet to judge this node by, and how it was chosen (one line).

    ``accelerator`` is what the offer sold (a name or a part); without it (or when the catalog
    does not know it) the name NVML reports picks the parts (:func:`parts_seen`). A name with
    several parts is narrowed by the sold ``interconnect`` and by the parts the GPU's own name
    points at (a sold name the GPUs do not match is kept: the node is judged by what was sold);
    if still ambiguous, the slowest part (bf16 peak, then memory and GPU-to-GPU bandwidth) is
    taken: a healthy node never fails against too high a reference."""
    candidates = parts_named(accelerator) if accelerator else []
    if not candidates and gpu_name:
        candidates = parts_seen(gpu_name)
    if not candidates:
        return None, f"no datasheet for {accelerator or gpu_name or 'this node'}"
    if interconnect:
        candidates = [s for s in candidates if s.interconnect == interconnect] or candidates
    if gpu_name and len(candidates) > 1:
        seen = parts_seen(gpu_name)
        candidates = [s for s in candidates if s in seen] or candidates
    if len(candidates) == 1:
        return candidates[0], f"datasheet of {candidates[0].part}"
    low = min(
        candidates,
        key=lambda s: (s.peak_tflops("bf16"), s.memory_bandwidth_gbps, s.intra_node_gbps),
    )
    parts = ", ".join(s.part for s in candidates)
    return low, f"datasheet of {low.part} (the slowest of {parts}: the part was not named)"


@dataclass(frozen=True, slots=True)
class Published:
    """One cited per-GPU figure: ``check`` (``train.resnet50``) of ``accelerator`` (a catalog
    name) at ``precision`` and per-GPU ``batch``."""

    accelerator: str
    check: str
    figure: float
    unit: str
    precision: str
    batch: int
    source_url: str
    source_date: str
    notes: str = ""


@functools.cache
def published(path: Path = PUBLISHED_CSV) -> tuple[Published, ...]:
    """The published figures (cached for the process)."""
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return tuple(
        Published(r["accelerator"], r["check"], float(r["figure"]), r["unit"], r["precision"],
                  int(r["batch"]), r["source_url"], r["source_date"], r.get("notes", ""))
        for r in rows
    )  # fmt: skip


def published_for(spec: AcceleratorSpec | None, check: str, precision: str) -> Published | None:
    """The published figure for this part's accelerator name, check and precision, if any."""
    if spec is None:
        return None
    names = {spec.name.lower(), spec.part.lower()}
    return next((p for p in published() if p.accelerator.lower() in names
                 and p.check == check and p.precision == precision), None)  # fmt: skip
