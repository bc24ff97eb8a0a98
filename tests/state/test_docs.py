"""docs/state.md shows the transition tables and timeouts the code enforces (no drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpulease.state import TRANSIENT_TIMEOUTS, TRANSITIONS, ClusterStatus, IntentStatus, NodeState

DOC = Path(__file__).resolve().parents[2] / "docs" / "state.md"
ROW = re.compile(r"^\| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$")


def _section(name: str) -> list[tuple[str, set[str], str, str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split(f"### {name}\n", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in body.splitlines():
        match = ROW.match(line)
        if match:
            status, targets, timeout, exit_ = match.groups()
            rows.append((status, set(re.findall(r"`(\w+)`", targets)), timeout, exit_))
    return rows


@pytest.mark.parametrize("enum_cls", [ClusterStatus, NodeState, IntentStatus], ids=str)
def test_the_documented_tables_are_the_enforced_ones(enum_cls: type) -> None:
    rows = _section(enum_cls.__name__)
    assert [status for status, *_ in rows] == [s.value for s in enum_cls]
    for status, targets, timeout, exit_ in rows:
        member = enum_cls(status)
        assert targets == {t.value for t in TRANSITIONS[enum_cls][member]}, status
        rule = TRANSIENT_TIMEOUTS[enum_cls].get(member)
        if rule is None:
            assert timeout == "—", status
        else:
            assert timeout == f"{rule.seconds / 60:g} min", status
            assert exit_.startswith(f"`{rule.exit}`"), status
