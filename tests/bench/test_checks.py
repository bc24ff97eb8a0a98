"""The bench's CPU checks measured for real in quick mode (numpy matmul and memcpy, a real file
written and read with direct I/O and without, a real ``local://`` checkpoint store), the GPU
checks skipping with their reasons on this CPU machine, and the datasheet verdicts of the GPU
checks on a spec made up for the test."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpulease.bench.checks import CheckContext
from gpulease.bench.checks.disk import disk_checks, measure
from gpulease.bench.checks.gpu import count_check, memory_check, none_found, topology_check
from gpulease.bench.checks.matmul import cpu_matmul, gpu_dtypes
from gpulease.bench.checks.memory import host_bandwidth
from gpulease.bench.checks.store import store_checks
from gpulease.bench.checks.timing import median_s, slowest_gpu
from gpulease.bench.checks.train import Shapes, training_steps
from gpulease.bench.options import BenchOptions, Expected
from gpulease.bench.references import published, published_for, spec_for
from gpulease.catalog.types import AcceleratorSpec
from gpulease.storage import LocalStore

QUICK = BenchOptions(quick=True)
CPU = CheckContext("cpu", 0, None, None, "no NVIDIA driver here")

SPEC = AcceleratorSpec(part="X-SXM", name="X", vendor="NVIDIA", architecture="test",
                       generation="hopper", form_factor="SXM5", memory_gb=80.0,
                       memory_bandwidth_gbps=3000.0, tflops={"fp32": 60.0, "bf16": 900.0},
                       interconnect="nvlink", intra_node_gbps=900.0, tdp_w=700.0,
                       release_year=2024, source="made up for the test")  # fmt: skip


def test_numpy_matmul_and_memcpy_give_positive_figures_without_a_reference() -> None:
    matmul = cpu_matmul(QUICK, CPU)
    assert matmul.name == "matmul.fp32" and matmul.figure is not None and matmul.figure > 0
    assert (matmul.verdict, matmul.reference) == ("info", None) and matmul.extra["n"] == 1024
    memory = host_bandwidth(QUICK, CPU)
    assert memory.figure is not None and memory.figure > 0 and memory.extra["where"] == "host"


def test_disk_writes_and_reads_a_real_file_and_removes_it(tmp_path: Path) -> None:
    checks = disk_checks(BenchOptions(quick=True, workdir=tmp_path), CPU)
    assert [c.name for c in checks] == ["disk.seq_write", "disk.seq_read", "disk.rand_read_iops"]
    assert all(c.figure is not None and c.figure > 0 and c.verdict == "info" for c in checks)
    assert checks[0].extra["direct"] is True and "O_DIRECT" in checks[0].detail  # ext4 here
    assert list(tmp_path.iterdir()) == []
    buffered = measure(tmp_path / "f.bin", 2 << 20, 100, CPU.timer, direct=False)
    assert all(c.figure is not None and c.figure > 0 for c in buffered)
    assert "page cache dropped" in buffered[1].detail and not (tmp_path / "f.bin").exists()
    gone = disk_checks(BenchOptions(workdir=tmp_path / "missing"), CPU)
    assert {c.verdict for c in gone} == {"skip"} and "does not exist" in gone[0].detail


def test_store_reads_a_real_local_store_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    store = LocalStore(root)
    store.write(7, {"model.bin": b"weights"})
    (tmp_path / "work").mkdir()
    options = BenchOptions(quick=True, workdir=tmp_path / "work", store=f"local://{root}")
    (check,) = store_checks(options, CPU)
    assert check.name == "store.read" and check.figure is not None and check.figure > 0
    assert check.extra["bytes"] == 32_000_000 and "checksums verified" in check.detail
    assert [p.name for p in root.iterdir()] == ["step-7"] and store.list_complete() == [7]
    assert list((tmp_path / "work").iterdir()) == []
    (skipped,) = store_checks(BenchOptions(), CPU)
    assert skipped.verdict == "skip" and "--store" in skipped.detail


def test_sold_gpus_and_memory_pass_or_fail_outright() -> None:
    sold = BenchOptions(expected=Expected(accelerator="X", gpu_count=8, gpu_memory_gb=80.0))
    ctx = replace(CPU, spec=SPEC)
    assert count_check(8, sold, ctx).verdict == "pass"
    short = count_check(7, sold, ctx)
    assert (short.verdict, short.reference_source, short.ratio) == ("fail", "offer", 7 / 8)
    assert memory_check([85.1] * 8, sold, ctx).verdict == "pass"
    small = memory_check([85.1] * 7 + [42.5], sold, ctx)
    assert small.verdict == "fail" and small.figure == 42.5
    by_sheet = memory_check([85.1], BenchOptions(), ctx)
    assert (by_sheet.reference, by_sheet.reference_source) == (80.0, "datasheet")
    assert count_check(8, BenchOptions(), CPU).verdict == "info"  # nothing sold to compare
    gone = none_found("no NVIDIA driver here", sold)
    assert [c.verdict for c in gone] == ["fail", "skip", "skip"] and gone[0].figure == 0.0
    assert [c.verdict for c in none_found("no driver", BenchOptions())] == ["skip"] * 3


def test_topology_against_the_datasheet_and_a_missing_nvlink() -> None:
    ctx = replace(CPU, spec=SPEC)
    full = {"nvlink_links": 18, "nvlink_gbps": 900.0, "pcie": "gen5 x16", "pcie_gbps": 128.0}
    half = {**full, "nvlink_links": 9, "nvlink_gbps": 450.0}
    none = {**full, "nvlink_links": 0, "nvlink_gbps": 0.0}
    assert topology_check([full] * 8, QUICK, ctx).verdict == "pass"
    degraded = topology_check([full] * 7 + [half], QUICK, ctx)
    assert (degraded.figure, degraded.ratio, degraded.verdict) == (450.0, 0.5, "warn")
    lost = topology_check([none] * 8, QUICK, ctx)
    assert lost.verdict == "fail" and "sold with NVLink" in lost.detail
    assert topology_check([full], QUICK, ctx).verdict == "info"  # one GPU: no link to judge


def test_matmul_dtypes_follow_the_datasheet() -> None:
    assert gpu_dtypes(replace(CPU, spec=SPEC)) == ["fp32", "bf16"]
    assert gpu_dtypes(CPU) == ["fp32", "tf32", "bf16", "fp16", "fp8"]  # part unknown: try all


def _part(name: str | None, gpu: str | None = None, link: str | None = None) -> str | None:
    spec, _how = spec_for(name, gpu, link)
    return spec.part if spec is not None else None


def test_the_datasheet_part_is_narrowed_by_what_is_known() -> None:
    assert _part("A100", link="nvlink") == "A100-SXM4-40GB"
    assert _part("A100", "NVIDIA A100-PCIE-40GB") == "A100-PCIe-40GB"
    assert _part("A100", "NVIDIA A100-SXM4-40GB") == "A100-SXM4-40GB"
    slowest, how = spec_for("A100")
    assert slowest is not None and slowest.part == "A100-PCIe-40GB" and "not named" in how
    assert _part("H100-SXM") == "H100-SXM" and _part(None, "NVIDIA H200") == "H200-SXM"
    assert spec_for("NoSuchGPU") == (None, "no datasheet for NoSuchGPU")
    assert _part("A100-80GB", "NVIDIA A100 80GB PCIe") == "A100-PCIe-80GB"
    assert _part("A100", "Tesla T4") == "A100-PCIe-40GB"  # judged by what was sold
    assert _part("NoSuchGPU", "NVIDIA A100-SXM4-80GB") == "A100-SXM4-80GB"
    for seen, part in [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 NVL", "H100-NVL"),
                       ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"), ("NVIDIA L4", "L4"),
                       ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada")]:  # fmt: skip
        assert _part(None, seen) == part, seen


def test_published_figures_are_cited_and_found_by_part() -> None:
    rows = published()
    assert rows and all(r.source_url.startswith("https://") and r.source_date for r in rows)
    a100, _how = spec_for("A100-SXM4-80GB")
    cited = published_for(a100, "train.resnet50", "mixed")
    assert cited is not None and (cited.figure, cited.batch) == (2470.0, 256)
    assert published_for(a100, "train.resnet50", "fp32") is None
    assert published_for(spec_for("H200")[0], "train.resnet50", "mixed") is None  # none cited


def test_timing_takes_the_median_after_the_warm_up_on_the_injected_timer() -> None:
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # three timed calls: 1, 3 and 2 s
    calls: list[int] = []
    seconds = median_s(lambda: calls.append(1), lambda: next(ticks), repeats=3, warmup=2)
    assert seconds == 2.0 and len(calls) == 5
    assert slowest_gpu([5.0, 2.0, 7.0]) == (1, "cuda:1, the slowest of 3 GPUs at once")
    assert slowest_gpu([5.0]) == (0, "cuda:0")


def test_the_training_steps_run_for_real_on_the_cpu() -> None:
    tiny = Shapes(resnet_width=4, image=32, images=2, d_model=32, heads=2, seq=16, sequences=2,
                  steps=1)  # fmt: skip
    resnet, gpt = training_steps(tiny, CPU)
    assert (resnet.name, gpt.name) == ("train.resnet50", "train.gpt_block")
    for check in (resnet, gpt):
        assert check.figure is not None and check.figure > 0 and check.verdict == "info", check
    assert "width 4" in resnet.detail and gpt.extra["d_model"] == 32
