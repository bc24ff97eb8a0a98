"""Which replicas a service should run: the spot/on-demand mix of a target and the plan that
moves the live replicas towards it (what to add of each kind, which ids to remove, in order).

Pure and stateless; :func:`gpulease.serve.autoscale.decide` calls :func:`plan` once it has the
target. It moves no state itself: the controller applies the adds and removals.

- The mix (:func:`mix`): the first ``on_demand_base`` replicas on-demand; of the rest,
  ``spot_share`` on spot, rounded to the nearest whole replica (a half goes to spot).
- Spot not usable: the spot replicas already live stay, the missing ones are wanted on-demand.
  Spot usable again: the spot replicas are added first; an on-demand one above the mix goes only
  once enough replicas are *ready* (the ready count never drops below the target by a removal).
- Removal order inside a kind: ready replicas first while the ready count stays at or above the
  target, newest first (``since``, then ``id``); then provisioning ones, then starting ones,
  newest first. On-demand replicas above the mix take the ready budget before spot ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulease.serve.autoscale import ReplicaView

# a half replica goes to spot; the epsilon keeps 0.1 × 5 from rounding the other way
_HALF = 0.5 + 1e-9
_STATE_ORDER = {"ready": 0, "provisioning": 1, "starting": 2}


def mix(target: int, on_demand_base: int, spot_share: float) -> tuple[int, int]:
    """``(spot, on_demand)`` for ``target`` replicas: the base on-demand, the rest's share spot."""
    base = min(on_demand_base, target)
    rest = target - base
    spot = min(rest, math.floor(rest * spot_share + _HALF))
    return spot, target - spot


@dataclass(frozen=True)
class Plan:
    """What to do to the live replicas: adds of each kind, removals (ids, in order)."""

    add_spot: int
    add_on_demand: int
    remove: tuple[int, ...]
    spot_instead: int  # on-demand replicas wanted because spot is not usable


def plan(
    target: int,
    live: Sequence[ReplicaView],
    on_demand_base: int,
    spot_share: float,
    *,
    spot_usable: bool,
) -> Plan:
    """Move ``live`` (provisioning, starting and ready replicas) towards ``target`` of the mix."""
    spot_live = [r for r in live if r.spot]
    od_live = [r for r in live if not r.spot]
    want_spot, want_od = mix(target, on_demand_base, spot_share)
    spot_instead = 0
    if not spot_usable and want_spot > len(spot_live):
        spot_instead = want_spot - len(spot_live)
        want_spot, want_od = len(spot_live), want_od + spot_instead
    ready = sum(1 for r in live if r.state == "ready")
    budget = max(0, ready - target)  # ready replicas that may go without a dip below the target
    remove: list[int] = []
    for group, want in ((od_live, want_od), (spot_live, want_spot)):
        chosen, budget = _removals(group, len(group) - want, budget)
        remove.extend(chosen)
    return Plan(
        add_spot=max(0, want_spot - len(spot_live)),
        add_on_demand=max(0, want_od - len(od_live)),
        remove=tuple(remove),
        spot_instead=spot_instead,
    )


def _removals(group: Sequence[ReplicaView], surplus: int, budget: int) -> tuple[list[int], int]:
    """Up to ``surplus`` ids of ``group`` to remove, spending ``budget`` on ready ones."""
    chosen: list[int] = []
    order = sorted(group, key=lambda r: (_STATE_ORDER[r.state], -r.since, -r.id))
    for r in order:
        if len(chosen) >= surplus:
            break
        if r.state == "ready":
            if budget == 0:
                continue
            budget -= 1
        chosen.append(r.id)
    return chosen, budget
