"""The constraint funnel: narrows the offer table step by step and records why offers fell out.

Every step is a boolean mask over the offer table; offers that were still alive and fail a step are
counted against that step's reason, so each rejected offer is explained exactly once, by the first
constraint it failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpulease.optimizer.plan import Rejection

Mask = npt.NDArray[np.bool_]


def examples(values: Iterable[object], limit: int = 4) -> str:
    """``a, b, c, … (+3)``: a short, sorted, de-duplicated list for reason lines."""
    unique = sorted({str(v) for v in values})
    shown = ", ".join(unique[:limit])
    return shown + (f", … (+{len(unique) - limit})" if len(unique) > limit else "")


@dataclass(slots=True)
class Funnel:
    """The offers still alive, and the rejections so far."""

    alive: Mask
    rejected: list[Rejection] = field(default_factory=list)

    @classmethod
    def of(cls, size: int) -> Funnel:
        return cls(np.ones(size, dtype=bool))

    def apply(self, passing: Mask, reason: str | Callable[[Mask], str]) -> None:
        """Keep only offers in ``passing``; explain the ones it removes."""
        removed = self.alive & ~passing
        count = int(np.count_nonzero(removed))
        if count:
            text = reason(removed) if callable(reason) else reason
            self.rejected.append(Rejection(text, count))
            self.alive &= passing

    def reject(self, reason: str, count: int) -> None:
        """Record a rejection decided outside the mask (e.g. a whole accelerator class)."""
        if count:
            self.rejected.append(Rejection(reason, count))

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.alive))
