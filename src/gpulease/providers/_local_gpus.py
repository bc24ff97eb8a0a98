"""The local provider's fake GPU load: ``providers.local.gpu_load`` and ``gpu_memory``.

Owns the config syntax and its checks, and the ``--fake-gpus`` script each node's agent gets (a
JSON object the agent's fake sampler validates again; this module imports no agent code)::

    providers:
      local:
        gpus: 4
        accelerator: T4
        gpu_load: 60                  # every fake GPU 60 % busy
        gpu_load: [90, [0, 100], 10]  # per GPU (its number 0..gpus-1): a constant, or a
                                      # pattern stepped through one sample at a time
        gpu_memory: 50                # memory in use, % of the GPU's; same syntax;
                                      # default: the same as gpu_load

GPUs past the end of a list are idle (0 %). Memory total and power limit come from the
accelerator's bundled spec (T4: 16 GB, 70 W). No states.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpulease.errors import UserInputError

Pattern = tuple[float, ...]
_IDLE: Pattern = (0.0,)


@dataclass(frozen=True, slots=True)
class Load:
    """One field's value: a pattern for ``every`` GPU, or one per GPU number (``per_gpu``)."""

    every: Pattern | None = _IDLE
    per_gpu: tuple[Pattern, ...] = ()

    def for_gpu(self, gpu: int) -> Pattern:
        if self.every is not None:
            return self.every
        return self.per_gpu[gpu] if gpu < len(self.per_gpu) else _IDLE


@dataclass(frozen=True, slots=True)
class GpuLoad:
    """The fake GPUs' utilisation and memory scripts (``memory`` None: follows utilisation)."""

    utilization: Load = Load()
    memory: Load | None = None

    def script(self, gpus: Sequence[int], accelerator: str) -> str:
        """The ``--fake-gpus`` JSON for a node holding fake GPUs ``gpus``."""
        memory_mb, power_w = _spec(accelerator)
        entries = []
        for gpu in gpus:
            util = self.utilization.for_gpu(gpu)
            memory = util if self.memory is None else self.memory.for_gpu(gpu)
            entries.append(
                {"index": gpu, "utilization_pct": list(util), "memory_pct": list(memory)}
            )
        return json.dumps(
            {"name": accelerator, "memory_total_mb": memory_mb, "power_limit_w": power_w,
             "gpus": entries}, separators=(",", ":"),
        )  # fmt: skip


def parse_gpu_load(section: dict[str, Any], gpus: int | None) -> GpuLoad:
    """``gpu_load`` and ``gpu_memory`` of ``providers.local``; UserInputError naming the field."""
    util = _load(section.get("gpu_load", 0), "providers.local.gpu_load", gpus)
    memory = None
    if section.get("gpu_memory") is not None:
        memory = _load(section["gpu_memory"], "providers.local.gpu_memory", gpus)
    return GpuLoad(utilization=util, memory=memory)


def _load(value: Any, field: str, gpus: int | None) -> Load:
    if not isinstance(value, list):
        return Load(every=(_percent(value, field),))
    if not value:
        raise UserInputError(f"{field}: a list needs one entry per GPU, not an empty list")
    if gpus is not None and len(value) > gpus:
        raise UserInputError(
            f"{field}: {len(value)} entries for {gpus} GPUs (providers.local.gpus)"
        )
    patterns = tuple(_pattern(entry, f"{field}[{i}]") for i, entry in enumerate(value))
    return Load(every=None, per_gpu=patterns)


def _pattern(value: Any, field: str) -> Pattern:
    if not isinstance(value, list):
        return (_percent(value, field),)
    if not value:
        raise UserInputError(f"{field}: a pattern needs at least one percentage")
    return tuple(_percent(v, f"{field}[{i}]") for i, v in enumerate(value))


def _percent(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 100:
        raise UserInputError(f"{field}: a percentage from 0 to 100, not {value!r}")
    return float(value)


def _spec(accelerator: str) -> tuple[float, float]:
    """(memory MB, power limit W) of the accelerator's bundled spec (the part the local provider
    sells it as: :meth:`Catalog.parts_of`, first); a T4's when unknown."""
    from gpulease.catalog import Catalog

    for spec in Catalog.load(bundled_only=True).parts_of(accelerator)[:1]:
        if spec.memory_gb > 0:
            return spec.memory_gb * 1000.0, float(spec.tdp_w or 70.0)
    return 16_000.0, 70.0
