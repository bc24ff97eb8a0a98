"""Judging a node's figures by more than its datasheet: against the cluster's other nodes
(:func:`against_peers`), the same instance type's history (:func:`against_history`) and a
task's absolute minimums (:func:`against_minimums`). A slowed node would slow any reference it
measured itself, so a figure far below its peers' median or its type's history fails even where
the datasheet has nothing to say (CPU nodes) — and a check keeps the *worse* of its verdicts.
Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from gpulease.bench.report import VERDICTS, BenchReport, Check

MIN_HISTORY = 3  # figures of the same instance type before history is a reference


def _worse(current: Check, other: Check) -> Check:
    """The check with the worse verdict (``current`` on a tie); info/skip never win."""
    rank = {v: i for i, v in enumerate(VERDICTS)}
    if other.verdict in ("info", "skip"):
        return current
    if current.verdict in ("info", "skip") or rank[other.verdict] < rank[current.verdict]:
        return other
    return current


def _rejudged(report: BenchReport, references: Mapping[str, float], source: str) -> BenchReport:
    checks = tuple(
        _worse(c, c.against(references[c.name], source))
        if c.figure is not None and c.name in references else c
        for c in report.checks
    )  # fmt: skip
    return replace(report, checks=checks)


def against_peers(reports: Sequence[BenchReport]) -> list[BenchReport]:
    """Each node's checks judged against the median of the same check on the *other* nodes
    (a two-node cluster: against the other node). One node: unchanged."""
    judged = []
    for i, report in enumerate(reports):
        others: dict[str, list[float]] = {}
        for j, peer in enumerate(reports):
            if j == i:
                continue
            for c in peer.checks:
                if c.figure is not None:
                    others.setdefault(c.name, []).append(c.figure)
        medians = {name: statistics.median(figs) for name, figs in others.items()}
        judged.append(_rejudged(report, medians, "peers"))
    return judged


def against_history(report: BenchReport, history: Mapping[str, Sequence[float]]) -> BenchReport:
    """The report judged against the median of past figures per check (of the same instance
    type; at least :data:`MIN_HISTORY` of them, else that check is left as it is)."""
    medians = {name: statistics.median(figs) for name, figs in history.items()
               if len(figs) >= MIN_HISTORY}  # fmt: skip
    return _rejudged(report, medians, "history")


def against_minimums(report: BenchReport, minimums: Mapping[str, float]) -> BenchReport:
    """A task's absolute thresholds (check name → the least acceptable figure; for
    ``net.latency`` the most): a figure past its threshold fails, one within it passes — the
    task's word overrides the other references for that check."""
    checks = []
    for c in report.checks:
        limit = minimums.get(c.name)
        if limit is None or c.figure is None:
            checks.append(c)
            continue
        judged = c.against(limit, "task")
        ok = judged.ratio is not None and judged.ratio >= 1.0
        checks.append(replace(judged, verdict="pass" if ok else "fail"))
    return replace(report, checks=tuple(checks))
