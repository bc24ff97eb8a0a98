"""Billing rules: how a provider turns a run's seconds into billed seconds (a base module, so
providers declare their rule and the state's ledger applies it).

Rule strings (a provider's ``billing`` attribute, the ledger's ``billing`` column):

- ``second`` — every second; ``second:M`` — every second, at least ``M`` seconds per run (AWS:
  ``second:60``), so the run's first ledger row carries the minimum;
- ``minute`` / ``hour`` — rounded up to a whole minute / hour per run;
- a ``,request`` suffix (``hour,request``): the provider bills from the request, not from when it
  reports the instance running (the controller's accrual reads it; the arithmetic is the same).

A *run* is one continuous billing of one node (a launch, or a start after a stop).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0}
HOURS_PER_MONTH = 730.0  # the clouds' convention for $/GB-month → $/hour


class BadBillingRule(ValueError):
    """A billing string that :meth:`Billing.parse` does not understand."""


@dataclass(frozen=True, slots=True)
class Billing:
    """A parsed billing rule (see the module docstring for the strings)."""

    unit_s: float = 1.0
    minimum_s: float = 0.0
    from_request: bool = False

    @classmethod
    def parse(cls, text: str) -> Billing:
        head, _, flag = text.strip().partition(",")
        if flag not in ("", "request"):
            raise BadBillingRule(f"billing rule {text!r}: unknown flag {flag!r} (only 'request')")
        unit, _, minimum = head.partition(":")
        if unit not in _UNITS:
            raise BadBillingRule(f"billing rule {text!r}: unit must be one of {', '.join(_UNITS)}")
        try:
            minimum_s = float(minimum) if minimum else 0.0
        except ValueError:
            raise BadBillingRule(f"billing rule {text!r}: minimum must be seconds") from None
        if not math.isfinite(minimum_s) or minimum_s < 0:
            raise BadBillingRule(f"billing rule {text!r}: minimum must be ≥ 0 seconds")
        return cls(_UNITS[unit], minimum_s, flag == "request")

    def billed(self, elapsed_s: float) -> float:
        """Billed seconds of a run that has lasted ``elapsed_s`` (0 for a run not begun)."""
        if elapsed_s <= 0:
            return 0.0
        seconds = elapsed_s
        if self.unit_s != 1.0:
            seconds = math.ceil(elapsed_s / self.unit_s) * self.unit_s
        return max(seconds, self.minimum_s)


@functools.lru_cache(maxsize=64)
def billing_rule(text: str) -> Billing:
    """:meth:`Billing.parse`, cached (the accrual and the ledger parse the same few strings on
    every pass; a :class:`Billing` is immutable)."""
    return Billing.parse(text)
