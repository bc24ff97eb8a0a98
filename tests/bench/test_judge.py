"""Judging by peers, history and a task's minimums: a slowed node fails against its peer even
without a datasheet reference; too little history is no reference; the worse verdict wins."""

from __future__ import annotations

from gpulease.bench.judge import MIN_HISTORY, against_history, against_minimums, against_peers
from gpulease.bench.report import BenchReport, Check


def _node(name: str, *checks: Check) -> BenchReport:
    return BenchReport(name, 0.0, 1.0, True, "cpu", None, 0, checks)


def test_a_node_far_below_its_peer_fails_and_the_peer_passes() -> None:
    fast = _node("a", Check.measured("matmul.fp32", 100.0), Check.measured("net.latency", 0.2))
    slow = _node("b", Check.measured("matmul.fp32", 20.0), Check.measured("net.latency", 0.2))
    judged_fast, judged_slow = against_peers([fast, slow])
    bad = judged_slow.check("matmul.fp32")
    assert bad is not None and bad.verdict == "fail" and bad.reference_source == "peers"
    assert bad.ratio == 0.2 and judged_slow.verdict == "fail"
    assert judged_fast.verdict == "pass"  # 5x its peer: fine
    assert against_peers([fast]) == [fast]


def test_a_datasheet_failure_is_not_hidden_by_equally_slow_peers() -> None:
    sheet = Check.measured("matmul.bf16", 30.0, reference=100.0, reference_source="datasheet")
    a, b = against_peers([_node("a", sheet), _node("b", sheet)])
    assert a.verdict == b.verdict == "fail"
    kept = a.check("matmul.bf16")
    assert kept is not None and kept.reference_source == "datasheet"


def test_history_needs_enough_runs() -> None:
    report = _node("a", Check.measured("disk.seq_read", 100.0))
    few = {"disk.seq_read": [1000.0] * (MIN_HISTORY - 1)}
    assert against_history(report, few) == report
    judged = against_history(report, {"disk.seq_read": [900.0, 1000.0, 1100.0]})
    assert judged.verdict == "fail" and judged.checks[0].reference == 1000.0


def test_task_minimums_override() -> None:
    report = _node(
        "a",
        Check.measured("disk.seq_read", 800.0, reference=4000.0, reference_source="datasheet"),
        Check.measured("net.latency", 2.0),
    )
    judged = against_minimums(report, {"disk.seq_read": 500.0, "net.latency": 1.0})
    read, latency = judged.checks
    assert (read.verdict, read.reference_source) == ("pass", "task")
    assert latency.verdict == "fail"  # 2 ms against at most 1 ms
