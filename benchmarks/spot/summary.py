"""Markdown tables of the spot protocol's cells (:mod:`protocol`): per trace, tick size, node count
and changeover (averaged over the deadlines), per set, and every cell.

"closes" is gpulease's share of uniform_progress's gap to the optimum, ``(UP − gpulease) / (UP −
optimal)``, computed per cell and averaged over cells (cells where UP already is optimal are left
out); "below UP" counts cells where gpulease's mean cost ratio is lower than uniform_progress's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Row = dict[str, Any]
Key = tuple[Any, ...]


def share(by_policy: dict[str, float]) -> float | None:
    """gpulease's share of uniform_progress's gap to the optimum in one cell (None: no gap)."""
    if not {"uniform_progress", "gpulease", "optimal"} <= by_policy.keys():
        return None
    gap = by_policy["uniform_progress"] - by_policy["optimal"]
    if gap <= 1e-9:
        return None
    return (by_policy["uniform_progress"] - by_policy["gpulease"]) / gap


def cells_of(rows: Iterable[Row]) -> dict[Key, dict[str, Row]]:
    """(set, trace, gap, nodes, deadline, changeover) → policy → cell."""
    out: dict[Key, dict[str, Row]] = {}
    for row in rows:
        key = (
            row["set"],
            row["trace"],
            row["gap_seconds"],
            row["nodes"],
            row["deadline_hours"],
            row["changeover_hours"],
        )
        out.setdefault(key, {})[row["policy"]] = row
    return out


def aggregate(groups: list[dict[str, Row]], policies: list[str]) -> dict[str, Any]:
    """Means of the mean cost ratios, total misses, cells below UP and the mean share closed."""
    means = {
        name: sum(g[name]["mean_cost_ratio"] for g in groups) / len(groups)
        for name in policies
        if all(name in g for g in groups)
    }
    misses = {
        name: sum(g[name]["misses"] for g in groups) for name in policies if name in groups[0]
    }
    shares = [s for g in groups if (s := share(_ratios(g))) is not None]
    below = sum(
        1
        for g in groups
        if {"gpulease", "uniform_progress"} <= g.keys()
        and g["gpulease"]["mean_cost_ratio"] < g["uniform_progress"]["mean_cost_ratio"]
    )
    return {
        "means": means,
        "misses": misses,
        "cells": len(groups),
        "below": below,
        "share": sum(shares) / len(shares) if shares else None,
        "min_share": min(shares) if shares else None,
        "max_share": max(shares) if shares else None,
    }


def _ratios(group: dict[str, Row]) -> dict[str, float]:
    return {name: cell["mean_cost_ratio"] for name, cell in group.items()}


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _line(label: list[str], agg: dict[str, Any], policies: list[str]) -> str:
    cols = list(label)
    for name in policies:
        miss = agg["misses"].get(name, 0)
        cols.append(f"{agg['means'][name]:.3f}" + (f" ({miss} miss)" if miss else ""))
    cols.append(f"{agg['below']}/{agg['cells']}")
    cols.append(_pct(agg["share"]))
    cols.append(f"{_pct(agg['min_share'])} … {_pct(agg['max_share'])}")
    return "| " + " | ".join(cols) + " |"


def _header(label: list[str], policies: list[str]) -> list[str]:
    head = [*label, *policies, "below UP", "closes", "closes min … max"]
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]


def compact_table(rows: list[Row], policies: list[str]) -> str:
    """One line per (set, trace, tick, nodes, changeover), averaged over the deadlines."""
    cells = cells_of(rows)
    groups: dict[Key, list[dict[str, Row]]] = {}
    for key, group in cells.items():
        set_name, trace, gap, nodes, _deadline, changeover = key
        groups.setdefault((set_name, trace, gap, nodes, changeover), []).append(group)
    lines = _header(["set", "trace", "tick s", "nodes", "d h"], policies)
    for (set_name, trace, gap, nodes, changeover), members in groups.items():
        label = [set_name, trace, f"{gap:g}", str(nodes), f"{changeover:g}"]
        lines.append(_line(label, aggregate(members, policies), policies))
    return "\n".join(lines)


def set_table(rows: list[Row], policies: list[str]) -> str:
    """Per set and changeover, per set, and the whole split."""
    cells = cells_of(rows)
    lines = _header(["set", "tick s", "d h"], policies)
    by_set: dict[str, list[Key]] = {}
    for key in cells:
        by_set.setdefault(key[0], []).append(key)
    for set_name, keys in by_set.items():
        gap = keys[0][2]
        for changeover in sorted({k[5] for k in keys}):
            members = [cells[k] for k in keys if k[5] == changeover]
            row = aggregate(members, policies)
            lines.append(_line([set_name, f"{gap:g}", f"{changeover:g}"], row, policies))
        row = aggregate([cells[k] for k in keys], policies)
        lines.append(_line([f"**{set_name}**", f"{gap:g}", "all"], row, policies))
    row = aggregate(list(cells.values()), policies)
    lines.append(_line(["**all sets**", "", ""], row, policies))
    return "\n".join(lines)


def cell_table(rows: list[Row], policies: list[str]) -> str:
    """Every cell."""
    head = ["set", "trace", "tick s", "nodes", "D h", "d h", *policies, "closes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, group in cells_of(rows).items():
        set_name, trace, gap, nodes, deadline, changeover = key
        cols = [set_name, trace, f"{gap:g}", str(nodes), f"{deadline:g}", f"{changeover:g}"]
        for name in policies:
            cell = group[name]
            miss = f" ({cell['misses']} miss)" if cell["misses"] else ""
            cols.append(f"{cell['mean_cost_ratio']:.3f}{miss}")
        cols.append(_pct(share(_ratios(group))))
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def markdown_report(rows: list[Row], policies: list[str]) -> str:
    return "\n\n".join(
        [
            "### Per set",
            set_table(rows, policies),
            "### Per trace, node count and changeover (mean over the deadlines)",
            compact_table(rows, policies),
            "### Every cell",
            cell_table(rows, policies),
        ]
    )
