"""The bench's results: one :class:`Check` per measured figure, gathered in a
:class:`BenchReport` — the contract between the checks (``python -m gpulease.bench``), the
server that runs them on nodes and keeps them, acceptance on launch, ``bench --history`` and
``plan --observed``. Plain data with a JSON form (``to_json`` / ``from_json``); pure.

Check names are dotted, ``<family>.<what>``: ``gpu.count``, ``gpu.memory``, ``gpu.topology``,
``matmul.<dtype>`` (fp32, tf32, bf16, fp16, fp8 on GPUs; ``matmul.fp32`` with numpy on CPUs),
``memory.bandwidth``, ``h2d.pinned``, ``d2h.pinned``, ``allreduce.node``, ``allreduce.cluster``,
``net.latency``, ``disk.seq_read``, ``disk.seq_write``, ``disk.rand_read_iops``, ``store.read``,
``train.resnet50``, ``train.gpt_block``. Units are fixed per family (:data:`UNITS`).

A verdict compares ``ratio`` = figure ÷ reference (for ``net.latency``: reference ÷ figure, so
higher is always better) with two bounds: ``pass`` at or above :data:`WARN_BELOW`, ``warn`` down
to :data:`FAIL_BELOW`, ``fail`` below it; ``skip`` when the check could not run here (no GPU, no
second node, no store) — its ``detail`` says why; ``info`` when there is no reference to compare
with (the figure is still kept: history and peers become references later).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Verdict = Literal["pass", "warn", "fail", "skip", "info"]
VERDICTS: tuple[Verdict, ...] = ("fail", "warn", "pass", "info", "skip")  # worst first
WARN_BELOW = 0.8  # a ratio below this warns
FAIL_BELOW = 0.5  # a ratio below this fails
REPORT_MARKER = "GPULEASE-BENCH-REPORT "  # with --json: the last stdout line is marker + JSON
SCHEMA = 1

UNITS: dict[str, str] = {
    "gpu.count": "GPUs",
    "gpu.memory": "GB",
    "gpu.topology": "GB/s",
    "matmul": "TFLOP/s",
    "memory.bandwidth": "GB/s",
    "h2d.pinned": "GB/s",
    "d2h.pinned": "GB/s",
    "allreduce": "GB/s",  # bus bandwidth (NCCL's busbw definition)
    "net.latency": "ms",
    "disk.seq_read": "MB/s",
    "disk.seq_write": "MB/s",
    "disk.rand_read_iops": "IOPS",
    "store.read": "MB/s",
    "train.resnet50": "images/s",
    "train.gpt_block": "tokens/s",
}
LOWER_IS_BETTER = frozenset({"net.latency"})


def unit_of(name: str) -> str:
    """The unit of check ``name`` (its full name, else its family before the first dot)."""
    return UNITS.get(name) or UNITS[name.split(".", 1)[0]]


def verdict_for(ratio: float | None) -> Verdict:
    """``pass`` / ``warn`` / ``fail`` for a ratio; ``info`` without one."""
    if ratio is None:
        return "info"
    if ratio >= WARN_BELOW:
        return "pass"
    return "warn" if ratio >= FAIL_BELOW else "fail"


def ratio_of(name: str, figure: float, reference: float | None) -> float | None:
    """figure ÷ reference (reference ÷ figure where lower is better); None without a usable
    reference."""
    if reference is None or reference <= 0 or figure < 0:
        return None
    if name in LOWER_IS_BETTER:
        return reference / figure if figure > 0 else None
    return figure / reference


@dataclass(frozen=True, slots=True)
class Check:
    """One measured figure against its reference. ``reference_source`` says where the
    reference came from: ``datasheet`` (the catalog's spec of the part), ``published`` (a cited
    figure in the bench's data), ``history`` (the same instance type's past runs), ``peers`` (the
    cluster's other nodes), ``task`` (an absolute threshold the task set), ``offer`` (what the
    offer sold: GPU count and memory) or ``baseline`` (a plain measurement taken in the same
    run); ``detail`` is one human line (how it was measured, or why it was skipped)."""

    name: str
    figure: float | None
    unit: str
    reference: float | None = None
    reference_source: str | None = None
    ratio: float | None = None
    verdict: Verdict = "info"
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # per-check facts (sizes, dtype, ...)

    @classmethod
    def measured(
        cls,
        name: str,
        figure: float,
        *,
        reference: float | None = None,
        reference_source: str | None = None,
        detail: str = "",
        extra: dict[str, Any] | None = None,
    ) -> Check:
        """A figure with its ratio and verdict worked out."""
        ratio = ratio_of(name, figure, reference)
        return cls(name, figure, unit_of(name), reference if ratio is not None else None,
                   reference_source if ratio is not None else None, ratio, verdict_for(ratio),
                   detail, dict(extra or {}))  # fmt: skip

    @classmethod
    def skipped(cls, name: str, why: str) -> Check:
        return cls(name, None, unit_of(name), verdict="skip", detail=why)

    def against(self, reference: float, source: str) -> Check:
        """The same figure judged against another reference (peers, history, a threshold)."""
        if self.figure is None:
            return self
        ratio = ratio_of(self.name, self.figure, reference)
        return replace(self, reference=reference, reference_source=source, ratio=ratio,
                       verdict=verdict_for(ratio))  # fmt: skip


@dataclass(frozen=True, slots=True)
class BenchReport:
    """One node's bench run. ``node`` names it (host name, or the cluster's node rank and
    instance id when the server ran it); ``accelerator`` the catalog name of its GPUs (None on a
    CPU node); ``quick`` whether the quick subset ran (acceptance runs it)."""

    node: str
    started_at: float
    wall_s: float
    quick: bool
    device: Literal["cpu", "cuda"]
    accelerator: str | None
    gpu_count: int
    checks: tuple[Check, ...]
    instance_type: str | None = None
    versions: dict[str, str] = field(default_factory=dict)  # python, numpy, torch, gpulease
    schema: int = SCHEMA

    @property
    def verdict(self) -> Verdict:
        """The worst verdict of its checks (``skip`` when every check was skipped)."""
        found = {c.verdict for c in self.checks}
        return next((v for v in VERDICTS if v in found), "skip")

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == "fail"]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchReport:
        fields = {k: v for k, v in data.items() if k != "verdict"}
        fields["checks"] = tuple(Check(**c) for c in data.get("checks", ()))
        return cls(**fields)

    def marker_line(self) -> str:
        """The line ``python -m gpulease.bench --json`` ends its output with."""
        return REPORT_MARKER + json.dumps(self.to_json(), separators=(",", ":"))


def report_from_output(text: str) -> BenchReport | None:
    """The report in a bench run's output (its last marker line), None when there is none."""
    for line in reversed(text.splitlines()):
        if line.startswith(REPORT_MARKER):
            return BenchReport.from_json(json.loads(line[len(REPORT_MARKER) :]))
    return None
