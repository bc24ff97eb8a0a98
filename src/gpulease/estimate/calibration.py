"""The estimator against published runs: expected GPU-hours, range and error for each.

:func:`calibration_report` runs :func:`~gpulease.estimate.training.estimate_training` on every run
of :data:`~gpulease.estimate.calibration_data.RUNS`; :func:`markdown_table` renders the rows for
docs/estimate.md (a test keeps the two equal; regenerate with ``python -m gpulease.estimate``).

The tolerance the estimator is held to (tests/estimate/test_calibration.py): the expected
GPU-hours lie within ±35 % of the published figure for at least 75 % of the runs, the published
figure lies inside [low, high] for at least 85 %, and the median absolute error is at most 20 %;
the two mixture-of-experts runs (DeepSeek-V2 and V3, the only ones the MoE factor is fitted to)
each within ±20 % and inside the range. :func:`heldout_report` estimates the published runs kept
out of calibration (:mod:`~gpulease.estimate.heldout_data`), the test of it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from gpulease.estimate.calibration_data import PARTS, RUNS, CalibrationRun
from gpulease.estimate.heldout_data import HELD_OUT
from gpulease.estimate.training import count, estimate_training
from gpulease.spec.models import ModelSpec, Workload

TOLERANCE = 0.35
WITHIN_TOLERANCE_SHARE = 0.75
INSIDE_RANGE_SHARE = 0.85
MEDIAN_ERROR_LIMIT = 0.20
MOE_TOLERANCE = 0.20


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One published run next to the estimate. ``error`` is expected / published − 1."""

    run: str
    params: float
    work: str
    hardware: str
    gpus: int
    published_gpu_hours: float
    published: str
    low_gpu_hours: float
    expected_gpu_hours: float
    high_gpu_hours: float
    mfu: float
    source: str
    note: str
    active_params: float | None = None  # a mixture of experts' parameters per token

    @property
    def error(self) -> float:
        return self.expected_gpu_hours / self.published_gpu_hours - 1.0

    @property
    def inside_range(self) -> bool:
        return self.low_gpu_hours <= self.published_gpu_hours <= self.high_gpu_hours

    @property
    def within_tolerance(self) -> bool:
        return abs(self.error) <= TOLERANCE


def workload_of(run: CalibrationRun) -> Workload:
    """The workload a user would write for ``run``."""
    model = ModelSpec(
        params=run.params,
        arch=run.arch,
        layers=run.layers,
        hidden=run.hidden,
        active_params=run.active_params,
        experts=run.experts,
        experts_per_token=run.experts_per_token,
    )
    return Workload(
        model=model,
        expert_parallel=run.expert_parallel,
        tokens=run.tokens,
        samples=run.samples,
        flops_per_sample=run.flops_per_sample,
        seq_len=run.seq_len,
        global_batch=run.global_batch,
        precision=run.precision,
    )


def _row(run: CalibrationRun) -> CalibrationRow:
    spec = PARTS[run.part]
    estimate = estimate_training(
        workload_of(run),
        spec,
        gpus_per_node=run.gpus_per_node,
        num_nodes=run.gpus // run.gpus_per_node,
        fabric=run.fabric,
        network_gbps=run.network_gbps,
    )
    if estimate is None:
        raise AssertionError(f"calibration run {run.run} does not fit {run.part}")
    gpu_hours = estimate.hours.scale(estimate.gpus)
    if run.tokens is not None:
        work = f"{count(run.tokens)} tokens"
    else:
        work = f"{count(run.samples or 0)} samples"
    hardware = f"{run.part} {run.precision}"
    return CalibrationRow(
        run.run,
        run.params,
        work,
        hardware,
        run.gpus,
        run.published_gpu_hours,
        run.published,
        gpu_hours.low,
        gpu_hours.expected,
        gpu_hours.high,
        estimate.mfu,
        run.source,
        run.note,
        run.active_params,
    )


def calibration_report() -> list[CalibrationRow]:
    """Every calibration run with the estimator's expected GPU-hours, range and error."""
    return [_row(run) for run in RUNS]


def heldout_report() -> list[CalibrationRow]:
    """The published runs held out of calibration (a test of it), estimated the same way."""
    return [_row(run) for run in HELD_OUT]


@dataclass(frozen=True, slots=True)
class CalibrationSummary:
    rows: int
    median_abs_error: float
    within_tolerance: int
    inside_range: int


def summarise(rows: list[CalibrationRow]) -> CalibrationSummary:
    return CalibrationSummary(
        rows=len(rows),
        median_abs_error=statistics.median(abs(row.error) for row in rows),
        within_tolerance=sum(row.within_tolerance for row in rows),
        inside_range=sum(row.inside_range for row in rows),
    )


def _hours(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _published(row: CalibrationRow) -> str:
    if "GPU-h" in row.published:
        return row.published
    return f"{_hours(row.published_gpu_hours)} ({row.published})"


def _params(row: CalibrationRow) -> str:
    if row.active_params is None:
        return count(row.params)
    return f"{count(row.active_params)} of {count(row.params)}"


def markdown_table(rows: list[CalibrationRow], *, held_out: bool = False) -> str:
    """The calibration table (or the held-out one) as Markdown, one line per run, then a
    summary line."""
    lines = [
        "| run | params | work | hardware | GPUs | published GPU-h | estimate GPU-h [low – high]"
        " | error | in range | MFU | source |",
        "|---|---:|---|---|---:|---:|---|---:|:---:|---:|---|",
    ]
    for row in rows:
        flag = "yes" if row.inside_range else "**no**"
        gpus = f"{row.gpus:,}" + (" *" if row.note else "")
        lines.append(
            f"| {row.run} | {_params(row)} | {row.work} | {row.hardware} | {gpus} | "
            f"{_published(row)} | "
            f"{_hours(row.expected_gpu_hours)} [{_hours(row.low_gpu_hours)} – "
            f"{_hours(row.high_gpu_hours)}] | {row.error:+.0%} | {flag} | {row.mfu:.0%} | "
            f"{row.source} |"
        )
    summary = summarise(rows)
    lines.append("")
    kind = "held-out runs (not used to fit anything)" if held_out else "runs"
    lines.append(
        f"{summary.rows} {kind}; median |error| {summary.median_abs_error:.0%}; "
        f"{summary.within_tolerance} within ±{TOLERANCE:.0%}; "
        f"{summary.inside_range} with the published figure inside [low, high]. "
        "\\* GPU count assumed."
    )
    return "\n".join(lines)
