"""The audit's values: a :class:`Finding`, the :class:`Period` it covers, its
:class:`Thresholds`, the rows it reads (:class:`AuditInputs`, loaded once per run) and the
rightsizing question it asks the optimizer through the caller (:class:`RightsizeAsk`: ``cost``
may not import the optimizer, so the server passes a :data:`Rightsizer`). Moves no states.

Money: a ledger row counts in the period by its overlap, its ``cost_usd`` pro-rated by the
overlap's share of the row's interval (:func:`overlap_cost`); hours are the overlap in hours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpulease.catalog import Catalog
from gpulease.cost.audit.telemetry import TelemetryDigest
from gpulease.errors import UserInputError
from gpulease.state.models import Cluster, Job, LedgerEntry, Node, StatusChange
from gpulease.units import parse_duration_hours

DEFAULT_SINCE = "90d"


@dataclass(frozen=True, slots=True)
class Period:
    """``[start, end)`` in UTC seconds."""

    start: float
    end: float

    @property
    def hours(self) -> float:
        return (self.end - self.start) / 3600.0

    def overlap_s(self, start: float, end: float) -> float:
        return max(0.0, min(end, self.end) - max(start, self.start))


def parse_since(value: str | None, now: float) -> Period:
    """The period ``[now - since, now)``; ``since`` is a duration (``90d``, ``12h``, ``30m``;
    default 90 days). A bad one is a :class:`UserInputError` naming ``since``."""
    text = DEFAULT_SINCE if value is None or value == "" else value
    try:
        hours = parse_duration_hours(text)
    except ValueError as exc:
        raise UserInputError(f"since: {exc}") from None
    if hours <= 0 or not math.isfinite(hours):
        raise UserInputError(f"since: must be a duration above zero, not {text!r}")
    return Period(start=now - hours * 3600.0, end=now)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What counts as a finding (docs/cost-audit.md explains each)."""

    idle_utilisation_pct: float = 10.0  # a GPU below this while billed is idle
    low_mfu: float = 0.30  # a job's mean MFU below this is low
    data_wait_share: float = 0.20  # a job waiting on input this share of its steps is input-bound
    memory_fraction: float = 1.0 / 3.0  # peak GPU memory below this share of the part's
    memory_headroom: float = 1.2  # the smaller part must hold the peak times this
    catalog_max_age_days: int = 30


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing to fix: ``dollars`` it cost (or would have saved) over the period, the
    ``evidence`` (ids, hours, figures) and the ``action``."""

    kind: str
    title: str
    dollars: float
    action: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "title": self.title,
            "dollars": self.dollars,
            "action": self.action,
            "evidence": dict(self.evidence),
        }


@dataclass(frozen=True, slots=True)
class RightsizeAsk:
    """The smaller part for a cluster's task: ``spec`` (the normalised task), its node shape,
    the pricing it ran at, and the GPU memory (GB) the part must have, at least / below."""

    spec: Mapping[str, Any]
    gpus_per_node: int
    num_nodes: int
    pricing: str
    min_memory_gb: float
    below_memory_gb: float
    hours: float


@dataclass(frozen=True, slots=True)
class RightsizeAnswer:
    """The optimizer's cheapest plan on a smaller part; ``node_price_per_hour`` per node."""

    accelerator: str
    provider: str
    region: str
    instance_type: str
    node_price_per_hour: float


Rightsizer = Callable[[RightsizeAsk], RightsizeAnswer | None]


@dataclass
class AuditInputs:
    """Everything one audit reads, loaded once: instance ledger rows overlapping the period,
    the clusters / nodes / jobs they and the telemetry name, the period's telemetry folded
    (:class:`TelemetryDigest`), the clusters' status history, the catalog,
    the config and the rightsizer (None: that finding is skipped with a note). ``public`` is
    the bundled or refreshed catalog whose age is judged (``catalog`` may add providers' own
    offers, dated today); None: ``catalog``."""

    period: Period
    ledger: Sequence[LedgerEntry]
    clusters: Mapping[int, Cluster]
    nodes: Mapping[int, Node]
    jobs: Mapping[int, Job]
    telemetry: TelemetryDigest
    changes: Sequence[StatusChange]
    catalog: Catalog | None
    config: Mapping[str, Any] = field(default_factory=dict)
    rightsizer: Rightsizer | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    public: Catalog | None = None
    notes: list[str] = field(default_factory=list)


def overlap_hours(row: LedgerEntry, period: Period) -> float:
    return period.overlap_s(row.started_at, row.ended_at) / 3600.0


def overlap_cost(row: LedgerEntry, period: Period, start: float | None = None) -> float:
    """The row's cost in ``[max(start, period.start), period.end)``, pro-rated by the share of
    the row's interval that overlap is (a zero-length row counts whole when it lies inside)."""
    lo = period.start if start is None else max(start, period.start)
    span = row.ended_at - row.started_at
    if span <= 0:
        return row.cost_usd if lo <= row.started_at < period.end else 0.0
    part = max(0.0, min(row.ended_at, period.end) - max(row.started_at, lo))
    return row.cost_usd * part / span


def spec_of(document: Mapping[str, Any] | None) -> dict[str, Any]:
    """The normalised task spec inside a cluster's or job's ``task`` document."""
    spec = (document or {}).get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


def rounded(value: float, digits: int = 4) -> float:
    return round(value, digits)
