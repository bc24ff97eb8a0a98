"""The optimizer: every feasible (offer × node count × pricing) for a task, priced, ranked and
explained.

``plan(task) -> list[Plan]`` is the SDK entry point; ``plan_all`` also returns the Pareto front and
the rejected offer classes.
"""

from __future__ import annotations

from gpulease.optimizer.core import plan, plan_all
from gpulease.optimizer.plan import (
    OBJECTIVES,
    Objective,
    Plan,
    PlanResult,
    Range,
    Rejection,
    ServingFigures,
)

__all__ = [
    "OBJECTIVES",
    "Objective",
    "Plan",
    "PlanResult",
    "Range",
    "Rejection",
    "ServingFigures",
    "plan",
    "plan_all",
]
