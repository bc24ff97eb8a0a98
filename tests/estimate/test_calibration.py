"""The estimator against published training runs, and the table in docs/estimate.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.estimate import calibration_report
from gpulease.estimate.calibration import (
    INSIDE_RANGE_SHARE,
    MEDIAN_ERROR_LIMIT,
    MOE_TOLERANCE,
    TOLERANCE,
    WITHIN_TOLERANCE_SHARE,
    heldout_report,
    markdown_table,
    summarise,
)
from gpulease.estimate.calibration_data import RUNS
from gpulease.estimate.heldout_data import HELD_OUT
from gpulease.estimate.mfu import GENERATIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "estimate.md"


@pytest.fixture(scope="module")
def rows():
    return calibration_report()


def test_calibration_covers_llms_cnns_and_three_generations(rows):
    assert len(rows) >= 25
    hardware = " ".join(row.hardware for row in rows)
    for part in ("A100-40GB", "A100-80GB", "H100-80GB", "V100-16GB"):
        assert part in hardware
    assert any("ResNet-50" in row.run for row in rows)
    assert all(row.source and row.published_gpu_hours > 0 for row in rows)


def test_expected_gpu_hours_are_within_tolerance_for_most_runs(rows):
    summary = summarise(rows)
    assert summary.within_tolerance >= WITHIN_TOLERANCE_SHARE * summary.rows
    assert summary.median_abs_error <= MEDIAN_ERROR_LIMIT


def test_published_figure_is_inside_the_range_for_most_runs(rows):
    summary = summarise(rows)
    assert summary.inside_range >= INSIDE_RANGE_SHARE * summary.rows


@pytest.mark.parametrize(
    "run", ["LLaMA 65B", "Llama 2 70B", "BLOOM 176B", "Llama 3.1 70B", "Llama 3.1 405B"]
)
def test_the_largest_runs_are_within_tolerance(rows, run):
    row = next(row for row in rows if row.run == run)
    assert abs(row.error) <= TOLERANCE
    assert row.inside_range


@pytest.mark.parametrize("run", ["DeepSeek-V2 (MoE)", "DeepSeek-V3 (MoE, fp8)"])
def test_the_moe_calibration_runs_are_within_their_tolerance(rows, run):
    row = next(row for row in rows if row.run == run)
    assert abs(row.error) <= MOE_TOLERANCE
    assert row.inside_range


def test_only_deepseek_calibrates_the_moe_factor():
    moe = [run.run for run in RUNS if run.active_params is not None]
    assert moe == ["DeepSeek-V2 (MoE)", "DeepSeek-V3 (MoE, fp8)"]
    assert {run.run for run in HELD_OUT}.isdisjoint(run.run for run in RUNS)
    assert all(run.active_params is not None for run in HELD_OUT)


def test_held_out_moe_runs_are_estimated_and_reported():
    held_out = heldout_report()
    assert len(held_out) >= 3
    assert all(row.source and row.published_gpu_hours > 0 for row in held_out)
    assert "Llama 4 Maverick (MoE)" in {row.run for row in held_out}


def test_docs_carry_the_same_table(rows):
    text = DOC.read_text(encoding="utf-8")
    hint = "docs/estimate.md is out of date: paste `python -m gpulease.estimate`"
    assert markdown_table(rows) in text, hint
    assert markdown_table(heldout_report(), held_out=True) in text, hint


def test_docs_carry_the_utilisation_table():
    text = DOC.read_text(encoding="utf-8")
    for generation, (base, n_half) in GENERATIONS.items():
        assert f"| {generation} | {base:.2f} | {n_half:.0e} |" in text
