"""Objectives order plans as documented; the Pareto front is non-dominated; results are
deterministic; a preference list picks the first feasible accelerator."""

from __future__ import annotations

from gpulease.catalog import Catalog
from tests.optimizer.conftest import ANY_GPU, PRETRAIN, run_plan


def test_cheapest_orders_by_expected_cost(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, workload=PRETRAIN, resources={"use_spot": "auto"})
    costs = [p.est_cost.expected for p in result.plans if p.est_cost]
    assert len(costs) == len(result.plans) > 3 and costs == sorted(costs)
    assert result.plans[0].reasons[0].startswith("cheapest plan")


def test_fastest_orders_by_expected_hours_within_budget(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, objective="fastest", workload=PRETRAIN, budget="$2000")
    hours = [p.est_hours.expected for p in result.plans if p.est_hours]
    assert hours == sorted(hours)
    assert all(p.est_cost and p.est_cost.expected <= 2000 for p in result.plans)
    cheapest = run_plan(small_catalog, workload=PRETRAIN, budget="$2000").plans[0]
    assert result.plans[0].est_hours and cheapest.est_hours
    assert result.plans[0].est_hours.expected < cheapest.est_hours.expected
    assert result.plans[0].num_nodes > cheapest.num_nodes  # it buys speed with nodes


def test_price_per_tflop_orders_by_dollars_per_dense_tflop(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, objective="price-per-tflop", resources=ANY_GPU)
    ratios = [p.price_per_hour / p.peak_tflops for p in result.plans]
    assert ratios == sorted(ratios)


def test_without_workload_plans_rank_by_hourly_price(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, resources=ANY_GPU)
    prices = [p.price_per_hour for p in result.plans]
    assert prices == sorted(prices)
    assert all(p.est_hours is None and p.est_cost is None for p in result.plans)
    assert any("no workload" in n for n in result.notes)


def test_pareto_front_is_non_dominated(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, workload=PRETRAIN, resources={"use_spot": "auto"})
    front = [
        (p.est_cost.expected, p.est_hours.expected)
        for p in result.pareto
        if p.est_cost and p.est_hours
    ]
    assert len(front) >= 2
    for i, (c, h) in enumerate(front):
        for j, (c2, h2) in enumerate(front):
            assert i == j or not (c2 <= c and h2 <= h and (c2, h2) != (c, h))
    # every ranked plan is dominated by or on the front
    for p in result.plans:
        assert p.est_cost and p.est_hours
        assert any(
            c <= p.est_cost.expected + 1e-6 and h <= p.est_hours.expected + 1e-6 for c, h in front
        )


def test_same_inputs_same_result(small_catalog: Catalog) -> None:
    first = run_plan(small_catalog, workload=PRETRAIN, resources={"use_spot": "auto"})
    second = run_plan(small_catalog, workload=PRETRAIN, resources={"use_spot": "auto"})
    assert first.to_dict() == second.to_dict()


def test_preference_list_takes_the_first_feasible_accelerator(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, workload=PRETRAIN, resources={"accelerators": ["B200:8", "H100:8", "A100:8"]}
    )
    assert {p.accelerator for p in result.plans} == {"H100"}
    assert any("lower in the preference order than H100" in r.reason for r in result.rejected)


def test_any_of_mapping_lets_the_cheapest_win(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, workload=PRETRAIN, resources={"accelerators": {"H100": 8, "A100": 8}}
    )
    assert {p.accelerator for p in result.plans} == {"H100", "A100"}


def test_spot_plans_cost_more_time_than_the_same_offer_on_demand(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog,
        top=50,
        workload=PRETRAIN,
        num_nodes=1,
        resources={"use_spot": "auto", "instance_type": "p4d.24xlarge", "regions": ["eu-west-1"]},
    )
    by_pricing = {p.pricing: p for p in result.plans}
    spot, od = by_pricing["spot"], by_pricing["on_demand"]
    assert spot.est_hours and od.est_hours
    assert spot.est_hours.expected > od.est_hours.expected
    assert any("interruption band 15-20%" in r for r in spot.reasons)


def test_on_demand_zones_collapse_into_one_regional_plan(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, top=50, resources={"instance_type": "p4d.24xlarge", "use_spot": "auto"}
    )
    on_demand = [p for p in result.plans if p.pricing == "on_demand"]
    spot = [p for p in result.plans if p.pricing == "spot"]
    assert len(on_demand) == 2 and all(p.zone is None for p in on_demand)  # us-east-1, eu-west-1
    assert len(spot) == 3 and all(p.zone for p in spot)


def test_plans_are_advice_unless_the_provider_is_launchable(small_catalog: Catalog) -> None:
    from gpulease.optimizer import plan_all
    from tests.optimizer.conftest import make_task

    result = plan_all(
        make_task(resources=ANY_GPU),
        catalog=small_catalog,
        config={},
        top=50,
        launchable=frozenset({"aws"}),
    )
    assert {p.provider for p in result.plans if p.launchable} == {"aws"}
    assert all(any("advice" in r for r in p.reasons) for p in result.plans if not p.launchable)
