"""``run_bench`` and ``python -m gpulease.bench`` for real on this CPU machine: the quick run's
marker line parses back into its report, GPU checks skip with why, a broken family becomes
``fail`` (one that cannot import, ``skip``) without stopping the run, bad options exit 2 naming
the option, and two processes meeting at a rendezvous on 127.0.0.1 measure
``allreduce.cluster`` and ``net.latency`` over gloo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulease.bench import checks
from gpulease.bench.__main__ import options_from
from gpulease.bench.judge import against_peers
from gpulease.bench.options import BenchOptions, Expected, Rendezvous
from gpulease.bench.report import report_from_output
from gpulease.bench.runner import run_bench
from tests.prometheus import free_port

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _bench(*args: str, cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-m", "gpulease.bench", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_the_quick_run_ends_with_its_marker_line(tmp_path: Path) -> None:
    proc = _bench("--quick", "--json", "--workdir", str(tmp_path), "--node", "n0", cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = report_from_output(out)
    assert report is not None and out.rstrip().splitlines()[-1].startswith("GPULEASE-BENCH")
    assert (report.node, report.quick, report.device, report.gpu_count) == ("n0", True, "cpu", 0)
    names = [c.name for c in report.checks]
    assert "store.read" not in names and "train.resnet50" not in names  # not quick families
    matmul, seq_read = report.check("matmul.fp32"), report.check("disk.seq_read")
    assert matmul is not None and matmul.figure is not None and matmul.figure > 0
    assert seq_read is not None and seq_read.figure is not None and seq_read.figure > 0
    for name in ("gpu.count", "h2d.pinned", "d2h.pinned", "allreduce.node"):
        skipped = report.check(name)
        assert skipped is not None and skipped.verdict == "skip" and skipped.detail, name
    assert report.verdict == "info" and report.versions["numpy"] and report.wall_s > 0
    assert list(tmp_path.iterdir()) == []  # the disk checks cleaned up


def test_a_broken_family_is_reported_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ("disk.seq_write", "disk.seq_read", "disk.rand_read_iops")
    monkeypatch.setitem(checks.FAMILY_CHECKS, "disk", ("disk", "no_such_function", names))
    monkeypatch.setitem(checks.FAMILY_CHECKS, "store", ("no_such_module", "f", ("store.read",)))
    report = run_bench(BenchOptions(only=("disk", "store", "net"), workdir=tmp_path))
    verdicts = {c.name: c.verdict for c in report.checks}
    assert verdicts == {"net.latency": "skip", **dict.fromkeys(names, "fail"), "store.read": "skip"}
    assert (
        "AttributeError" in report.checks[1].detail and "no_such_module" in report.checks[4].detail
    )
    assert report.verdict == "fail"


def test_a_node_sold_with_gpus_that_has_none_fails_its_count() -> None:
    sold = Expected(accelerator="NoSuchGPU", gpu_count=8)
    report = run_bench(BenchOptions(quick=True, only=("gpu", "matmul"), expected=sold))
    count = report.check("gpu.count")
    assert count is not None and (count.figure, count.verdict) == (0.0, "fail")
    assert "the offer sold 8" in count.detail and report.accelerator == "NoSuchGPU"
    assert report.check("matmul.fp32") is not None  # the CPU is still measured


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--only", "gpu,nope"], "--only"),
        (["--rendezvous", "host-without-port", "--rank", "0", "--world", "2"], "--rendezvous"),
        (["--rendezvous", "h:29500", "--rank", "2", "--world", "2"], "--rank"),
        (["--rank", "0"], "--rank"),
        (["--accelerator", " "], "--accelerator"),
        (["--gpus", "-1"], "--gpus"),
        (["--gpus", "many"], "--gpus"),
        (["--interconnect", "carrier-pigeon"], "--interconnect"),
        (["--workdir", "/no/such/dir"], "--workdir"),
        (["--store", "ftp://host/x"], "--store"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        options_from(argv)
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_argv_maps_onto_the_options(tmp_path: Path) -> None:
    options, as_json = options_from(
        ["--quick", "--json", "--only", "matmul,disk", "--workdir", str(tmp_path), "--store",
         "local:///x", "--accelerator", "H100", "--gpus", "8", "--gpu-memory-gb", "80",
         "--interconnect", "nvlink", "--instance-type", "p5.48xlarge", "--rendezvous",
         "10.0.0.1:29500", "--rank", "1", "--world", "2", "--node", "n1"]
    )  # fmt: skip
    assert as_json and options.quick and options.only == ("matmul", "disk")
    assert (options.workdir, options.store, options.node) == (tmp_path, "local:///x", "n1")
    assert options.rendezvous == Rendezvous("10.0.0.1", 29500, 1, 2)
    e = options.expected
    assert (e.accelerator, e.gpu_count, e.gpu_memory_gb, e.interconnect, e.instance_type) == (
        "H100", 8, 80.0, "nvlink", "p5.48xlarge")  # fmt: skip


@pytest.mark.slow
@pytest.mark.xdist_group("torch-ddp")  # multi-process torch runs one at a time
def test_two_nodes_at_a_rendezvous_measure_allreduce_and_latency(tmp_path: Path) -> None:
    port = str(free_port())
    procs = [_bench("--quick", "--json", "--only", "allreduce,net", "--rendezvous",
                    f"127.0.0.1:{port}", "--rank", str(rank), "--world", "2", "--node",
                    f"n{rank}", cwd=tmp_path) for rank in (0, 1)]  # fmt: skip
    outputs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _out, err in outputs]
    reports = [report_from_output(out) for out, _err in outputs]
    assert all(r is not None for r in reports)
    for report in reports:
        assert report is not None
        cluster, latency = report.check("allreduce.cluster"), report.check("net.latency")
        assert cluster is not None and cluster.figure is not None and cluster.figure > 0
        assert "gloo" in cluster.detail and cluster.extra["ranks"] == 2
        assert latency is not None and latency.figure is not None and 0 < latency.figure < 1000
    judged = against_peers([r for r in reports if r is not None])
    assert {c.reference_source for r in judged for c in r.checks if c.figure} == {"peers"}


def test_the_command_line_of_options_reads_back_into_the_same_options(tmp_path: Path) -> None:
    from gpulease.bench.__main__ import options_from
    from gpulease.bench.options import BenchOptions, Expected, Rendezvous, bench_argv

    sold = Expected("H100", 8, 80.0, "nvlink", "p5.48xlarge")
    meet = Rendezvous("10.0.0.1", 29511, 1, 2)
    options = BenchOptions(quick=True, only=("matmul", "disk"), workdir=tmp_path,
                           store=f"local://{tmp_path}", expected=sold, rendezvous=meet,
                           node="c/1:i-1")  # fmt: skip
    argv = bench_argv(options)
    assert argv[:4] == ["python", "-m", "gpulease.bench", "--json"]
    assert options_from(argv[3:]) == (options, True)
    assert options_from(bench_argv(BenchOptions())[3:]) == (BenchOptions(), True)
