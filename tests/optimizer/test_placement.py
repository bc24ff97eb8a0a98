"""Placement by workload: a latency target and $ per 1M output tokens put small inference parts
first where they meet the target (examples/serve-8b.yaml), big ones where the model needs them
(examples/serve-70b.yaml), and reject the rest naming the figures."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from gpulease.catalog import Catalog
from gpulease.optimizer import PlanResult, plan_all
from gpulease.spec import Task, load_task, task_from_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL = {"T4", "L4", "A10G", "A10"}  # the inference class: 16-24 GB, PCIe, < $1.5/h a GPU


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return Catalog.load(bundled_only=True)


def _example(name: str, **workload: Any) -> Task:
    task = load_task(EXAMPLES / f"{name}.yaml")
    if not workload:
        return task
    document = task.model_dump(mode="json", by_alias=True, exclude_none=True)
    document["workload"].update(workload)
    return task_from_dict(document)


def _plan(catalog: Catalog, task: Task, top: int = 40) -> PlanResult:
    return plan_all(task, catalog=catalog, config={}, top=top)


def test_serve_8b_puts_a_small_part_first(bundled: Catalog) -> None:
    result = _plan(bundled, _example("serve-8b"))
    assert result.plans
    best = result.plans[0]
    assert best.accelerator in SMALL
    for plan in result.plans:
        serving = plan.serving
        assert serving is not None and serving.latency_p95_s is not None
        assert serving.latency_p95_s <= 15.0
        assert serving.replicas >= 1 and serving.requests_per_second == 0.5
    per_token = [p.usd_per_1m_output_tokens for p in result.plans]
    assert all(v is not None for v in per_token)
    assert per_token == sorted(per_token)  # cheapest cost = cheapest per token at one load
    # $ per 1M output tokens: the plan's $/h over 0.5 req/s × 256 tokens × 3600 s
    assert best.usd_per_1m_output_tokens == pytest.approx(
        best.price_per_hour / (0.5 * 256 * 3600) * 1e6
    )
    assert best.usd_per_1k_requests == pytest.approx(best.price_per_hour / (0.5 * 3600) * 1e3)


def test_a_part_too_slow_for_the_target_is_rejected_with_its_figures(bundled: Catalog) -> None:
    result = _plan(bundled, _example("serve-8b"))
    assert all(p.accelerator != "L4" or p.gpus_per_node > 1 for p in result.plans)
    reasons = [r.reason for r in result.rejected]
    l4 = next(r for r in reasons if "latency target on 1 × L4" in r)
    assert "p95 latency" in l4 and "> 15.00 s target" in l4 and "TTFT" in l4 and "× " in l4


def test_a_tight_target_moves_the_plan_to_big_parts(bundled: Catalog) -> None:
    result = _plan(bundled, _example("serve-8b", latency_p95="4s"))
    assert result.plans and result.plans[0].accelerator not in SMALL
    assert all(p.serving and p.serving.latency_p95_s <= 4.0 for p in result.plans)
    small = [r.reason for r in result.rejected if "latency target on 1 × A10G" in r.reason]
    assert small and "> 4.00 s target" in small[0]


def test_serve_70b_still_needs_big_parts(bundled: Catalog) -> None:
    result = _plan(bundled, _example("serve-70b", latency_p95="20s"))
    assert result.plans
    for plan in result.plans:
        assert plan.accelerator not in SMALL
        assert plan.gpus_per_node * plan.gpu_memory_gb > 140  # 70B × 2 bytes
        assert plan.serving and plan.serving.latency_p95_s <= 20.0


def test_more_load_takes_more_replicas_at_the_same_target(bundled: Catalog) -> None:
    def best(rps: float) -> Any:
        return _plan(bundled, _example("serve-8b", requests_per_second=rps), top=1).plans[0]

    light, heavy = best(0.5), best(20)
    assert heavy.serving and light.serving
    assert heavy.total_gpus > light.total_gpus
    assert heavy.serving.latency_p95_s <= 15.0


def test_plans_carry_the_serving_figures_in_json(bundled: Catalog) -> None:
    result = _plan(bundled, _example("serve-8b"), top=3)
    serving = result.to_dict()["plans"][0]["serving"]
    assert set(serving) >= {
        "replicas",
        "ttft_p95_s",
        "tpot_p95_s",
        "latency_p95_s",
        "usd_per_1m_output_tokens",
        "usd_per_1k_requests",
    }
    assert 0 < serving["usd_per_1m_output_tokens"] < 100


def test_training_plans_have_no_serving_figures(bundled: Catalog) -> None:
    result = _plan(bundled, load_task(EXAMPLES / "finetune-7b.yaml"), top=2)
    assert result.plans and all(p.serving is None for p in result.plans)
    assert result.to_dict()["plans"][0]["serving"] is None


def test_the_plan_table_shows_latency_and_cost_per_token(bundled: Catalog) -> None:
    from rich.console import Console

    from gpulease.cli.plan_cmd import _table

    result = _plan(bundled, _example("serve-8b"), top=3)
    out = io.StringIO()
    Console(file=out, width=200).print(_table(result.plans, "serve-8b"))
    text = out.getvalue()
    assert "$/1M tok" in text and "$/1k req" in text and "p95" in text
    assert f"{result.plans[0].usd_per_1m_output_tokens:,.2f}" in text
