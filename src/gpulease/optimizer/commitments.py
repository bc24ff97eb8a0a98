"""Committed prices in plans: the reserved column with the user's negotiated discounts
(:mod:`gpulease.catalog.commitments`), and the reason that says a plan's figure is the user's.

Owns no state; :mod:`.core` calls :func:`reserved_column` when a task asks for a commitment and
:func:`mark_user_prices` on the ranked plans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from gpulease.catalog.commitments import (
    Discount,
    discount_for,
    discounts_from_config,
    reserved_prices,
)
from gpulease.catalog.types import OfferTable
from gpulease.optimizer.plan import Plan


def user_discounts(config: Mapping[str, Any] | None) -> tuple[Discount, ...]:
    """The config's validated ``pricing.discounts``."""
    return discounts_from_config(config)


def reserved_column(
    offers: OfferTable, commitment: str, discounts: Sequence[Discount]
) -> np.ndarray:
    """The committed $/h per offer: published, or the user's where a discount covers it."""
    prices, _ = reserved_prices(offers, commitment, discounts)
    return prices


def mark_user_prices(
    plans: Sequence[Plan], commitment: str, discounts: Sequence[Discount]
) -> list[Plan]:
    """``plans`` with a reason on each reserved plan priced by the user's discount."""
    if not discounts or commitment not in ("1y", "3y"):
        return list(plans)
    out: list[Plan] = []
    for plan in plans:
        hit = (
            discount_for(discounts, plan.provider, plan.region, commitment)
            if plan.pricing == "reserved"
            else None
        )
        out.append(replace(plan, reasons=(*plan.reasons, hit.describe())) if hit else plan)
    return out
