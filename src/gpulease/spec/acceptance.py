"""``resources.acceptance``: bench every node of a cluster once all are up and before ``setup``,
and refuse the bad ones (docs/bench.md, "Acceptance on launch").

Accepted forms:

- ``acceptance: true`` — the defaults below; ``false`` (or absent) — no acceptance;
- ``acceptance: {min_ratio: 0.5, minimums: {disk.seq_read: 1000, matmul.bf16: 400},
  max_replacements: 2, checks: [matmul, disk], degraded_for: 1h}``.

``min_ratio``: a figure below this fraction of its reference (the datasheet, or the median of the
cluster's other nodes) fails the node; ``minimums``: absolute thresholds by check name (the
least acceptable figure in the check's unit; for ``net.latency`` the most, in ms), which override
the other references; ``max_replacements``: failed nodes replaced per launch target before the
launch fails over to its next plan; ``checks``: the check families that count (default: every
family of the quick bench); ``degraded_for``: how long an offer that delivered a failing node is
ranked down. Pure (pydantic only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema, field_validator

from gpulease.spec.base import SpecModel
from gpulease.spec.quantities import NonNegativeInt, PositiveDuration

__all__ = ["ACCEPTANCE_FAMILIES", "AcceptanceField", "AcceptanceSpec"]

ACCEPTANCE_FAMILIES = ("gpu", "matmul", "memory", "transfer", "allreduce", "net", "disk")
"""The families of the quick bench (``gpulease.bench.options.QUICK_FAMILIES``; the spec may not
import the bench). ``h2d.pinned`` and ``d2h.pinned`` belong to ``transfer``."""
_CHECK_NAME = re.compile(r"^[a-z0-9]+\.[a-z0-9_]+$")
_FAMILY_OF_PREFIX = {"h2d": "transfer", "d2h": "transfer"}


def family_of(check: str) -> str:
    """The family of a dotted check name (``disk.seq_read`` → ``disk``, ``h2d.pinned`` →
    ``transfer``)."""
    prefix = check.split(".", 1)[0]
    return _FAMILY_OF_PREFIX.get(prefix, prefix)


class AcceptanceSpec(SpecModel):
    """The quick bench on every node before setup; a node that fails it is replaced."""

    min_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    """A figure below this fraction of its reference (datasheet or peers' median) fails the
    node (0 < r ≤ 1; default 0.5)."""
    minimums: dict[str, Annotated[float, Field(gt=0.0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    """Absolute thresholds by check name, in the check's unit: {disk.seq_read: 1000 (MB/s),
    matmul.bf16: 400 (TFLOP/s)}; for net.latency the most (ms). They override the other
    references."""
    max_replacements: NonNegativeInt = 2
    """Failed nodes replaced per launch target before the launch fails over to its next plan."""
    checks: tuple[str, ...] | None = None
    """The check families that count: gpu, matmul, memory, transfer, allreduce, net, disk
    (default: all of them)."""
    degraded_for: PositiveDuration = 1.0
    """How long an offer (provider × region × instance type) that delivered a failing node is
    ranked down: 1h, 30m (hours; default 1h)."""

    @field_validator("checks")
    @classmethod
    def _known_families(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        unknown = [v for v in value if v not in ACCEPTANCE_FAMILIES]
        if unknown:
            raise ValueError(
                f"unknown check famil{'y' if len(unknown) == 1 else 'ies'} "
                f"{', '.join(map(repr, unknown))}; choose among {', '.join(ACCEPTANCE_FAMILIES)}"
            )
        if not value:
            raise ValueError("name at least one check family, or leave checks out for all")
        return tuple(dict.fromkeys(value))

    @field_validator("minimums")
    @classmethod
    def _known_checks(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if not _CHECK_NAME.match(name) or family_of(name) not in ACCEPTANCE_FAMILIES:
                raise ValueError(
                    f"{name!r} is not a check of the quick bench (family.what, e.g. "
                    "disk.seq_read, matmul.bf16, net.latency)"
                )
        return value


def parse_acceptance(value: object) -> object:
    """``true`` → the defaults, ``false``/None → None, a mapping → itself; anything else passes
    through for pydantic to refuse with the field's name."""
    if value is None or isinstance(value, AcceptanceSpec):
        return value
    if isinstance(value, bool):
        return {} if value else None
    if isinstance(value, Mapping):
        return dict(value)
    raise ValueError(
        f"expected true, false or {{min_ratio, minimums, max_replacements, checks, "
        f"degraded_for}}, got {value!r}"
    )


_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "boolean", "description": "true: acceptance with the defaults; false: none."},
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "min_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1,
                              "default": 0.5},
                "minimums": {"type": "object", "additionalProperties": {
                    "type": "number", "exclusiveMinimum": 0}},
                "max_replacements": {"type": "integer", "minimum": 0, "default": 2},
                "checks": {"type": "array", "items": {"enum": list(ACCEPTANCE_FAMILIES)},
                           "minItems": 1},
                "degraded_for": {"type": ["string", "number"], "default": "1h"},
            },
        },
    ],
    "description": "Bench every node once all are up and before setup; replace the nodes that "
    "fail (at most max_replacements), then fail over to the next plan.",
    "examples": [True, {"min_ratio": 0.5, "minimums": {"disk.seq_read": 1000}}],
}  # fmt: skip

AcceptanceField = Annotated[
    AcceptanceSpec | None, BeforeValidator(parse_acceptance), WithJsonSchema(_SCHEMA)
]
"""``resources.acceptance`` in any accepted form; None when absent or ``false``."""
