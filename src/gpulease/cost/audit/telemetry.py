"""The period's telemetry folded into what the audit needs, in one streamed pass (90 days of
60 s points is 130,000 rows per node: none is kept): per cluster the idle GPU-seconds billed and
their dollars, the peak GPU memory, and per job (or cluster without one) the mean MFU and
data-wait share.

Owns :class:`TelemetryDigest` and :func:`digest_points`. A point is a bucket ``[at, at +
resolution_s)`` of one node's mean figures (``telemetry_points``); it is matched to the instance
ledger rows of the same cluster and node rank (a row whose node row is gone matches any rank),
and a GPU's idle second is priced at its row's ``price_per_hour / gpu_count``. Per node only the
coarsest stored resolution is read, so no second counts twice. Moves no states.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpulease.cost.audit.model import Period
    from gpulease.state.models import LedgerEntry, Node

#: (cluster_id, job_id, node_rank, resolution_s, at, data) of one point
PointRow = tuple[int, int | None, int, int, float, Mapping[str, Any]]
TRAIN_FIGURES = ("mfu", "data_wait_ratio")


@dataclass
class IdleTally:
    gpu_s: float = 0.0
    usd: float = 0.0


@dataclass
class TelemetryDigest:
    """``idle``: cluster id → idle GPU-seconds and dollars; ``peaks``: cluster id → (peak used,
    total) GPU memory in MB; ``train``: ``("job", id)`` or ``("cluster", id)`` → mean figures."""

    idle: dict[int, IdleTally] = field(default_factory=dict)
    peaks: dict[int, tuple[float, float]] = field(default_factory=dict)
    train: dict[tuple[str, int], dict[str, float]] = field(default_factory=dict)
    points: int = 0


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class _Rows:
    """A cluster's instance rows per node rank, sorted by start, for bucket lookups."""

    def __init__(self, ledger: Iterable[LedgerEntry], nodes: Mapping[int, Node]) -> None:
        by: dict[tuple[int, int | None], list[LedgerEntry]] = defaultdict(list)
        for row in ledger:
            if row.cluster_id is None:
                continue
            node = nodes.get(row.node_id) if row.node_id is not None else None
            by[(row.cluster_id, None if node is None else node.node_rank)].append(row)
        self.rows = {k: sorted(v, key=lambda r: r.started_at) for k, v in by.items()}
        self.starts = {k: [r.started_at for r in v] for k, v in self.rows.items()}

    def overlapping(self, cluster_id: int, rank: int, lo: float, hi: float) -> list[LedgerEntry]:
        found: list[LedgerEntry] = []
        for key in ((cluster_id, rank), (cluster_id, None)):
            rows = self.rows.get(key)
            if not rows:
                continue
            stop = bisect.bisect_left(self.starts[key], hi)
            found += [r for r in rows[:stop] if r.ended_at > lo]
        return found


def _gpus(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [g for g in data.get("gpus") or [] if isinstance(g, Mapping)]


def digest_points(
    points: Iterable[PointRow],
    *,
    period: Period,
    ledger: Sequence[LedgerEntry],
    nodes: Mapping[int, Node],
    idle_below_pct: float,
) -> TelemetryDigest:
    """Fold ``points`` (already one resolution per node) into a :class:`TelemetryDigest`."""
    rows = _Rows(ledger, nodes)
    out = TelemetryDigest()
    sums: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for cluster_id, job_id, rank, resolution_s, at, data in points:
        out.points += 1
        gpus = _gpus(data)
        _peak(out, cluster_id, gpus)
        _train(sums, cluster_id, job_id, data.get("train"))
        idle = sum(
            1
            for g in gpus
            if (u := _number(g.get("utilization_pct"))) is not None and u < idle_below_pct
        )
        if not idle:
            continue
        end = at + resolution_s
        for row in rows.overlapping(cluster_id, rank, at, end):
            seconds = period.overlap_s(max(at, row.started_at), min(end, row.ended_at))
            if seconds > 0:
                tally = out.idle.setdefault(cluster_id, IdleTally())
                tally.gpu_s += seconds * idle
                tally.usd += seconds * idle * row.price_per_hour / 3600.0 / max(row.gpu_count, 1)
    out.train = {
        key: {f: acc[f] / acc[f + "_n"] for f in TRAIN_FIGURES if acc[f + "_n"]}
        for key, acc in sums.items()
    }
    return out


def _peak(out: TelemetryDigest, cluster_id: int, gpus: Sequence[Mapping[str, Any]]) -> None:
    for gpu in gpus:
        used, total = _number(gpu.get("memory_used_mb")), _number(gpu.get("memory_total_mb"))
        if used is None or total is None:
            continue
        old = out.peaks.get(cluster_id, (0.0, 0.0))
        out.peaks[cluster_id] = (max(old[0], used), max(old[1], total))


def _train(
    sums: dict[tuple[str, int], dict[str, float]],
    cluster_id: int,
    job_id: int | None,
    train: object,
) -> None:
    if not isinstance(train, Mapping):
        return
    key = ("job", job_id) if job_id is not None else ("cluster", cluster_id)
    acc = sums[key]
    for figure in TRAIN_FIGURES:
        value = _number(train.get(figure))
        if value is not None:
            acc[figure] += value
            acc[figure + "_n"] += 1
