"""The bench report contract: verdicts from ratios, lower-is-better checks, the JSON round trip
and the marker line the server reads a node's report from."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpulease.bench.report import (
    FAIL_BELOW,
    WARN_BELOW,
    BenchReport,
    Check,
    report_from_output,
    unit_of,
    verdict_for,
)


def _report(*checks: Check) -> BenchReport:
    return BenchReport("node-0", 1000.0, 2.5, True, "cpu", None, 0, checks)


def test_verdicts_follow_the_ratio_bounds() -> None:
    assert verdict_for(None) == "info"
    assert verdict_for(WARN_BELOW) == "pass" and verdict_for(1.3) == "pass"
    assert verdict_for(WARN_BELOW - 0.01) == "warn" and verdict_for(FAIL_BELOW) == "warn"
    assert verdict_for(FAIL_BELOW - 0.01) == "fail"


def test_a_check_works_out_its_ratio_and_lower_latency_is_better() -> None:
    slow = Check.measured("matmul.fp32", 40.0, reference=100.0, reference_source="datasheet")
    assert (slow.ratio, slow.verdict, slow.unit) == (0.4, "fail", "TFLOP/s")
    fast_net = Check.measured("net.latency", 0.5, reference=1.0, reference_source="peers")
    assert fast_net.ratio == 2.0 and fast_net.verdict == "pass" and fast_net.unit == "ms"
    bare = Check.measured("disk.seq_read", 900.0)
    assert (bare.reference, bare.ratio, bare.verdict) == (None, None, "info")
    assert bare.against(1000.0, "peers").verdict == "pass"
    assert bare.against(3000.0, "history").verdict == "fail"
    assert unit_of("allreduce.cluster") == "GB/s"


def test_the_report_verdict_is_its_worst_check() -> None:
    assert _report().verdict == "skip"
    skipped = Check.skipped("gpu.count", "no GPU on this node")
    assert _report(skipped).verdict == "skip"
    ok = Check.measured("disk.seq_write", 500.0, reference=400.0, reference_source="baseline")
    bad = Check.measured("matmul.fp32", 1.0, reference=10.0, reference_source="history")
    assert _report(skipped, ok).verdict == "pass"
    report = _report(skipped, ok, bad)
    assert report.verdict == "fail" and report.failed() == [bad]
    assert report.check("disk.seq_write") == ok and report.check("nothing") is None


names = st.sampled_from(["matmul.fp32", "net.latency", "disk.seq_read", "train.gpt_block"])


@given(names, st.floats(0.0, 1e6), st.one_of(st.none(), st.floats(0.001, 1e6)))
def test_the_report_survives_its_marker_line(name: str, figure: float, ref: float | None) -> None:
    check = Check.measured(name, figure, reference=ref, reference_source="datasheet",
                           extra={"n": 4096})  # fmt: skip
    report = _report(check, Check.skipped("store.read", "no checkpoint store"))
    output = f"some log line\n{report.marker_line()}\ntrailing noise\n"
    assert report_from_output(output) == report
    assert report_from_output("no report here") is None
    assert BenchReport.from_json(report.to_json()) == report
