"""The four example workloads of the README, planned over the bundled catalog, give answers a
senior ML engineer would agree with."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulease.catalog import Catalog
from gpulease.optimizer import PlanResult, plan_all
from gpulease.spec import load_task

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return Catalog.load(bundled_only=True)


def _plan(catalog: Catalog, name: str, **options: object) -> PlanResult:
    task = load_task(EXAMPLES / f"{name}.yaml")
    return plan_all(task, catalog=catalog, config={}, **options)  # type: ignore[arg-type]


def test_finetune_7b_within_a_day(bundled: Catalog) -> None:
    result = _plan(bundled, "finetune-7b", top=200)
    assert result.plans
    wanted = {"A100-80GB", "H100", "H200", "A100", "L40S", "A10G"}
    for plan in result.plans:
        assert plan.accelerator in wanted and plan.gpus_per_node == 8
        assert plan.est_hours and plan.est_hours.expected <= 24
        assert plan.sharding == "fsdp"
        assert plan.gpu_hours and 20 < plan.gpu_hours.expected / plan.num_nodes < 300
    best = result.plans[0]
    assert best.accelerator in {"H100", "H200"}  # the fastest cards are also the cheapest here
    assert any("FSDP" in r for r in best.reasons)
    # 24 GB A10G cards need two nodes to finish within the day
    a10g = [p for p in result.plans if p.accelerator == "A10G"]
    assert a10g and min(p.num_nodes for p in a10g) >= 2


def test_pretrain_1_3b_on_spot(bundled: Catalog) -> None:
    result = _plan(bundled, "pretrain-1.3b-spot", top=20)
    assert result.plans
    for plan in result.plans:
        assert plan.pricing == "spot"
        assert plan.est_cost and plan.est_cost.expected <= 5000
        assert plan.est_hours and plan.est_hours.expected <= 120
        assert any("interruption band" in r for r in plan.reasons)
    # ~2e20 FLOPs: a few hundred A100-class GPU-hours, not thousands
    best = result.plans[0]
    assert best.gpu_hours and 150 < best.gpu_hours.expected < 1500
    reasons = " | ".join(r.reason for r in result.rejected)
    assert "no spot price" in reasons and "too slow for the 120 h deadline" in reasons


def test_serve_70b_in_bf16(bundled: Catalog) -> None:
    result = _plan(bundled, "serve-70b", top=50)
    assert result.plans
    for plan in result.plans:
        # 70B × 2 bytes = 140 GB of weights, plus KV cache
        assert plan.gpus_per_node * plan.gpu_memory_gb > 140
        assert plan.est_hours and plan.est_hours.expected == pytest.approx(720)
    reasons = " | ".join(r.reason for r in result.rejected)
    assert (
        "weights + KV cache do not fit 1 × H100-SXM" in reasons
        or "weights + KV cache do not fit 1 or 2 × H100-SXM" in reasons
    )


def test_resnet50_imagenet_90_epochs(bundled: Catalog) -> None:
    result = _plan(bundled, "resnet50-imagenet", top=50)
    assert result.plans
    eight_a100 = [
        p
        for p in result.plans
        if p.accelerator == "A100" and p.num_nodes == 1 and p.gpus_per_node == 8
    ]
    assert eight_a100
    # NVIDIA's published 8×A100 throughput puts 90 epochs at roughly 1.5–3 hours
    hours = eight_a100[0].est_hours
    assert hours and 1.0 < hours.expected < 4.0
    assert {p.pricing for p in result.plans} == {"spot", "on_demand"}  # use_spot: auto
    reasons = " | ".join(r.reason for r in result.rejected)
    assert "too slow for the 72 h deadline: T4" in reasons


def test_fastest_objective_buys_time_with_nodes(bundled: Catalog) -> None:
    cheapest = _plan(bundled, "pretrain-1.3b-spot").plans[0]
    fastest = _plan(bundled, "pretrain-1.3b-spot", objective="fastest").plans[0]
    assert fastest.est_hours and cheapest.est_hours
    assert fastest.est_hours.expected < cheapest.est_hours.expected / 4
    assert fastest.total_gpus > cheapest.total_gpus
