"""The ``pool:`` section of a pool file: nodes kept for queued managed jobs.

A pool file is a task (``name``, ``resources`` — what each node is, spot or on-demand through
``resources.use_spot`` — ``setup``, ``file_mounts``…) with a top-level ``pool:`` section, read into
``Task.pool`` (:class:`PoolSpec`). A managed job asks for a pool with ``resources.pool: NAME``.

CONTRACT (read by the pools loop; keep names and types stable): ``min_nodes`` ≤ ``max_nodes``,
``max_nodes`` ≥ 1, ``idle_timeout_s`` in seconds. SkyPilot 0.14's ``pool: {workers: N}`` (and
``min_workers`` / ``max_workers`` / ``downscale_delay_seconds``) is translated before validation by
:mod:`gpulease.spec.skypilot_serve`. Moves no states.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gpulease.spec.base import SpecModel as _Model
from gpulease.spec.serve_fields import Count, Seconds, Step

__all__ = ["DEFAULT_MAX_NODES", "PoolSpec"]

DEFAULT_MAX_NODES = 4
"""``max_nodes`` when neither it nor a larger ``min_nodes`` is given."""


class PoolSpec(_Model):
    """Nodes kept for managed jobs: the pool grows while jobs wait and shrinks when nodes idle."""

    min_nodes: Count = 0
    """Nodes kept even with no job waiting."""
    max_nodes: Step = DEFAULT_MAX_NODES
    """Most nodes while jobs wait (at least min_nodes; unset: 4, or min_nodes when larger)."""
    idle_timeout_s: Seconds = Field(default=600.0, alias="idle_timeout")
    """A node idle this long is released (down to min_nodes): 10m."""

    @field_validator("max_nodes")
    @classmethod
    def _at_least_min(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("min_nodes", 0)
        if value < low:
            raise ValueError(f"must be at least min_nodes ({low}), got {value}")
        return value

    @model_validator(mode="after")
    def _raise_default_max(self) -> Self:
        if self.max_nodes < self.min_nodes:  # max_nodes not given: it follows min_nodes
            object.__setattr__(self, "max_nodes", self.min_nodes)
        return self
