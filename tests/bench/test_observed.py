"""The observed matmul summary (``<home>/bench/observed.json``): medians and sample counts per
offer from stored reports, its atomic file and its reading, and the catalog ``plan --observed``
plans over — the observed figure in place of the datasheet's only with enough runs, and notes
saying which."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.bench.observed import (
    MIN_SAMPLES,
    OBSERVED_FILE,
    BenchSample,
    ObservedOffer,
    observed_catalog,
    read_observed,
    summarise,
    write_observed,
)
from gpulease.bench.report import BenchReport, Check
from gpulease.catalog import Catalog


def _report(bf16: float | None, fp32: float = 60.0) -> dict[str, object]:
    checks = [Check.measured("matmul.fp32", fp32), Check.measured("disk.seq_read", 900.0),
              Check.skipped("matmul.fp8", "no fp8 here") if bf16 is None
              else Check.measured("matmul.bf16", bf16)]  # fmt: skip
    return BenchReport("n", 1.0, 1.0, True, "cuda", "H100", 8, tuple(checks)).to_json()


def test_the_summary_holds_medians_and_counts_per_offer(tmp_path: Path) -> None:
    samples = [BenchSample("aws", "p5.48xlarge", "H100", _report(bf16))
               for bf16 in (600.0, 640.0, 500.0, None)]  # fmt: skip
    samples.append(BenchSample("local", None, None, _report(1.0)))  # no instance type: left out
    document = summarise(samples, now=5.0)
    assert document["min_samples"] == MIN_SAMPLES and document["updated_at"] == 5.0
    [offer] = document["offers"]
    assert (offer["provider"], offer["instance_type"], offer["accelerator"]) == (
        "aws", "p5.48xlarge", "H100")  # fmt: skip
    assert offer["matmul"] == {"bf16": {"tflops": 600.0, "samples": 3},
                               "fp32": {"tflops": 60.0, "samples": 4}}  # fmt: skip
    path = write_observed(tmp_path, document)
    assert path == tmp_path / OBSERVED_FILE
    medians = {"bf16": (600.0, 3), "fp32": (60.0, 4)}
    assert read_observed(path) == [ObservedOffer("aws", "p5.48xlarge", "H100", medians)]
    assert read_observed(tmp_path / "none.json") is None
    path.write_text('{"offers": [{"provider": "aws"}]}')
    with pytest.raises(ValueError, match="not an observed summary"):
        read_observed(path)


def test_observed_figures_replace_the_datasheet_only_with_enough_runs() -> None:
    catalog = Catalog.load(bundled_only=True)
    observed = [ObservedOffer("aws", "p5.48xlarge", "H100", {"bf16": (612.0, 5)}),
                ObservedOffer("aws", "p4d.24xlarge", "A100", {"bf16": (200.0, MIN_SAMPLES - 1)}),
                ObservedOffer("aws", "no-such-type", "H100", {"bf16": (1.0, 9)})]  # fmt: skip
    seen = observed_catalog(catalog, observed, "bf16", source="observed.json")
    offers = seen.catalog.offers
    p5 = (offers.provider == "aws") & (offers.instance_type == "p5.48xlarge")
    [part] = set(offers.part[p5].tolist())
    assert seen.parts == {part: "H100-SXM"}
    spec = seen.catalog.spec_for(part)
    assert spec.peak_tflops("bf16") == 612.0 and spec.name == "H100"
    assert spec.tflops["fp8"] == catalog.spec_for("H100-SXM").tflops["fp8"]  # others: datasheet
    assert set(offers.accelerator[p5].tolist()) == {"H100"} and len(offers) == len(catalog.offers)
    p4d = (offers.provider == "aws") & (offers.instance_type == "p4d.24xlarge")
    assert set(offers.part[p4d].tolist()) <= set(catalog.accelerators)  # too few runs: as it was
    assert seen.notes == (
        "observed: H100 bf16 612 TFLOP/s over 5 runs, datasheet 989 (aws p5.48xlarge)",
        f"observed: aws p4d.24xlarge has {MIN_SAMPLES - 1} bf16 run(s), fewer than "
        f"{MIN_SAMPLES}: datasheet peak",
    )
    none = observed_catalog(catalog, None, "bf16", source="/h/bench/observed.json")
    assert none.catalog is catalog and "no /h/bench/observed.json yet" in none.notes[0]
