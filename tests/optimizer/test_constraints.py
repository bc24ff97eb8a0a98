"""Every hard constraint removes the offers it should and says why, once per offer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy
import pytest

from gpulease.catalog import Catalog
from gpulease.catalog.types import OfferTable
from gpulease.providers.local import LocalProvider
from tests.optimizer.conftest import ANY_GPU, PRETRAIN, run_plan


def _accounted(result: Any) -> None:
    """Each offer is either feasible or rejected exactly once."""
    rejected = sum(r.offers for r in result.rejected)
    assert rejected + result.offers_feasible == result.offers_considered


def _reasons(result: Any) -> str:
    return " | ".join(r.reason for r in result.rejected)


@pytest.mark.parametrize(
    ("resources", "expected_reason", "survivors"),
    [
        ({"instance_type": "p4d.24xlarge"}, "instance type is not p4d.24xlarge", {"p4d.24xlarge"}),
        (
            {"accelerators": "H100:8"},
            "accelerator not requested",
            {"p5.48xlarge", "gpu_8x_h100_sxm5", "8x_H100_SECURE"},
        ),
        ({"accelerators": "T4:4"}, "GPUs per node differ", {"g4dn.12xlarge"}),
        (
            {"providers": ["lambda"]},
            "provider not in the allow-list",
            {"gpu_8x_h100_sxm5", "gpu_1x_a10"},
        ),
        (
            {"exclude_providers": ["aws", "gcp", "runpod"]},
            "provider excluded",
            {"gpu_8x_h100_sxm5", "gpu_1x_a10"},
        ),
        ({"regions": ["europe-west4"]}, "region not in the allow-list", {"a2-ultragpu-8g"}),
        (
            {"exclude_regions": ["us-east-1", "EU-SE-1"]},
            "region excluded",
            {"p4d.24xlarge", "a2-ultragpu-8g"},
        ),
        (
            {"cpus": "100+"},
            "cpus: 100+ vCPUs",
            {"p5.48xlarge", "gpu_8x_h100_sxm5", "8x_H100_SECURE"},
        ),
        ({"memory": "1500+"}, "memory: 1500+ GB of RAM", {"p5.48xlarge", "gpu_8x_h100_sxm5"}),
    ],
)
def test_resource_constraint(
    small_catalog: Catalog, resources: dict[str, Any], expected_reason: str, survivors: set[str]
) -> None:
    result = run_plan(small_catalog, resources={**ANY_GPU, **resources})
    assert expected_reason in _reasons(result)
    assert {p.instance_type for p in result.plans} == survivors
    _accounted(result)


def test_spot_only_rejects_offers_without_a_spot_price(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, resources={**ANY_GPU, "use_spot": True})
    assert "no spot price" in _reasons(result)
    assert all(p.pricing == "spot" for p in result.plans)
    _accounted(result)


def test_auto_spot_prices_both(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, top=50, resources={**ANY_GPU, "use_spot": "auto"})
    assert {p.pricing for p in result.plans} == {"spot", "on_demand"}


def test_reserved_prices_only_with_a_commitment(small_catalog: Catalog) -> None:
    plain = run_plan(small_catalog, top=50, resources=ANY_GPU)
    assert all(p.pricing != "reserved" for p in plain.plans)
    committed = run_plan(small_catalog, top=50, resources={**ANY_GPU, "commitment": "3y"})
    reserved = [p for p in committed.plans if p.pricing == "reserved"]
    assert reserved and all(p.price_per_hour == 9.0 for p in reserved)


def test_phi_data_keeps_only_providers_with_a_baa(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, top=50, resources=ANY_GPU, data_policy="phi")
    assert {p.provider for p in result.plans} == {"aws", "gcp"}
    assert "HIPAA BAA" in _reasons(result)
    _accounted(result)


def test_eu_residency_keeps_eu_regions(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, top=50, resources=ANY_GPU, data_policy=["eu-resident"])
    assert {p.region for p in result.plans} == {"eu-west-1", "europe-west4", "EU-SE-1"}


def test_user_data_class_from_config(small_catalog: Catalog) -> None:
    config = {"data_classes": {"gcp-only": {"providers": ["gcp"]}}}
    result = run_plan(small_catalog, config=config, resources=ANY_GPU, data_policy="gcp-only")
    assert {p.provider for p in result.plans} == {"gcp"}


def test_memory_rejects_small_gpus_with_the_reason(small_catalog: Catalog) -> None:
    serve = {
        "kind": "inference",
        "model": {"params": "70B"},
        "precision": "bf16",
        "requests_per_second": 1,
        "prompt_tokens": 500,
        "output_tokens": 200,
        "hours": 10,
    }
    result = run_plan(small_catalog, top=50, workload=serve)
    assert "weights + KV cache do not fit" in _reasons(result)
    assert all(p.gpus_per_node * p.gpu_memory_gb >= 140 for p in result.plans)
    _accounted(result)


def test_deadline_rejects_slow_offers_and_names_the_best_they_reach(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, top=50, workload=PRETRAIN, deadline="12h")
    reasons = _reasons(result)
    assert "too slow for the 12 h deadline" in reasons and "best" in reasons
    assert all(p.est_hours is not None and p.est_hours.expected <= 12 for p in result.plans)
    _accounted(result)


def test_budget_rejects_expensive_offers(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, top=50, workload=PRETRAIN, budget="$700")
    assert "over the $700 budget" in _reasons(result)
    assert all(p.est_cost is not None and p.est_cost.expected <= 700 for p in result.plans)


def test_max_price_caps_the_whole_plan(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, top=50, workload=PRETRAIN, resources={"max_price_per_hour": 30}
    )
    assert result.plans and all(p.price_per_hour <= 30 for p in result.plans)
    assert "above max_price_per_hour" in _reasons(result)


def test_fixed_num_nodes_is_respected(small_catalog: Catalog) -> None:
    result = run_plan(
        small_catalog, workload=PRETRAIN, num_nodes=2, resources={"accelerators": "A100:8"}
    )
    assert result.plans and all(p.num_nodes == 2 for p in result.plans)


def test_nothing_feasible_says_why(small_catalog: Catalog) -> None:
    result = run_plan(small_catalog, workload=PRETRAIN, deadline="10m")
    assert not result.plans and result.rejected
    assert any("no feasible plan" in n for n in result.notes)
    _accounted(result)


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return Catalog.load(bundled_only=True)


def test_a_t4_task_gets_an_x86_64_host_and_hears_why_not_the_cheaper_arm64_one(
    bundled: Catalog,
) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": "T4:auto"})
    assert result.plans and all(p.cpu_arch == "x86_64" for p in result.plans)
    assert "g5g" not in " ".join(p.instance_type for p in result.plans)
    arm = [r for r in result.rejected if r.reason.startswith("host CPU arm64")]
    assert len(arm) == 1 and arm[0].offers == 2, _reasons(result)
    assert "the task asks x86_64: g5g.16xlarge, g5g.xlarge" in arm[0].reason
    assert "resources.cpu_arch: arm64 or any" in arm[0].reason
    _accounted(result)


@pytest.mark.parametrize(
    ("cpu_arch", "first"), [("any", "g5g.xlarge"), ("arm64", "g5g.xlarge"), ("amd64", None)]
)
def test_cpu_arch_any_or_arm64_lets_graviton_in(
    bundled: Catalog, cpu_arch: str, first: str | None
) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": "T4:1", "cpu_arch": cpu_arch})
    if first is None:  # amd64 is read as x86_64
        assert {p.cpu_arch for p in result.plans} == {"x86_64"}
        return
    assert result.plans[0].instance_type == first and result.plans[0].cpu_arch == "arm64"
    assert "arm64 host" in result.plans[0].reasons[1]
    if cpu_arch == "arm64":
        assert {p.cpu_arch for p in result.plans} == {"arm64"}
        assert "host CPU x86_64, the task asks arm64" in _reasons(result)
    else:
        assert not any(r.reason.startswith("host CPU") for r in result.rejected)
    _accounted(result)


def test_this_machine_runs_a_default_task_whatever_its_cpu(
    bundled: Catalog, tmp_path: Path
) -> None:
    """The local provider's offers are this machine (here made arm64, like an arm64 laptop): a
    task with the default cpu_arch still plans on it; asking for x86_64-only clouds is what
    the default does elsewhere, and asking for arm64 leaves x86_64 machines out."""
    sold = LocalProvider(tmp_path).offers(bundled)
    columns = sold.table.column_dict()
    columns["cpu_arch"] = numpy.full(len(sold.table), "arm64")
    catalog = bundled.with_offers(OfferTable.from_columns(columns), label="local", specs=sold.specs)
    result = run_plan(catalog, resources={"providers": ["local"]})
    assert result.plans and result.plans[0].provider == "local"
    assert result.plans[0].cpu_arch == "arm64"
    x86_local = bundled.with_offers(sold.table, label="local", specs=sold.specs)
    asked_arm = run_plan(x86_local, resources={"providers": ["local"], "cpu_arch": "arm64"})
    if set(sold.table.cpu_arch.tolist()) == {"x86_64"}:
        assert not asked_arm.plans


def test_a_set_with_one_name_at_several_counts_plans_any_of_them(bundled: Catalog) -> None:
    """SkyPilot's {A100:4, A100:8, A100-80GB:2}: A100 at 4 or 8 GPUs, or A100-80GB at 2."""
    result = run_plan(bundled, top=50, resources={"accelerators": "{A100:8, V100:1, V100:8}"})
    shapes = {(p.accelerator, p.gpus_per_node) for p in result.plans}
    assert shapes <= {("A100", 8), ("V100", 1), ("V100", 8)}
    assert {("A100", 8), ("V100", 1), ("V100", 8)} <= shapes, shapes
    counts = next(r for r in result.rejected if r.reason.startswith("GPUs per node differ"))
    assert "V100:1 or V100:8 asked" in counts.reason
    _accounted(result)


def test_an_ordered_list_prefers_by_name_and_count(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": ["V100:8", "V100:1"]})
    assert result.plans and {(p.accelerator, p.gpus_per_node) for p in result.plans} == {
        ("V100", 8)
    }
    assert "lower in the preference order than V100:8" in _reasons(result)


@pytest.mark.parametrize("zone", ["us-east-1a", "us-central1-a"])
def test_a_zone_keeps_its_region_and_the_plans_name_it(bundled: Catalog, zone: str) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": "T4:auto", "zone": zone})
    region = zone[:-2] if zone.startswith("us-central") else zone[:-1]
    assert result.plans and {p.region for p in result.plans} == {region}
    assert {p.zone for p in result.plans} == {zone}
    assert any(r.reason.startswith("zone not in the allow-list") for r in result.rejected)
    _accounted(result)


def test_kubernetes_is_named_as_missing_not_as_a_wrong_allow_list(bundled: Catalog) -> None:
    result = run_plan(bundled, resources={"accelerators": "L4:1", "providers": "kubernetes"})
    assert not result.plans
    assert "gpulease has no Kubernetes provider yet" in _reasons(result)


def test_a_grace_part_asked_by_name_brings_its_arm64_host(bundled: Catalog) -> None:
    """GH200 comes only on an arm64 (Grace) host: asking for it is asking for that host, unless
    the task sets cpu_arch itself."""
    result = run_plan(bundled, top=50, resources={"accelerators": "GH200:1"})
    assert result.plans and {p.cpu_arch for p in result.plans} == {"arm64"}
    explicit = run_plan(bundled, resources={"accelerators": "GH200:1", "cpu_arch": "x86_64"})
    assert not explicit.plans and "host CPU arm64, the task asks x86_64" in _reasons(explicit)


def test_network_tier_best_keeps_fast_interconnects_and_names_the_field(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": "H100:8", "network_tier": "best"})
    offers = bundled.offers
    for plan in result.plans:
        (row,) = numpy.flatnonzero(
            (offers.instance_type == plan.instance_type)
            & (offers.provider == plan.provider)
            & (offers.region == plan.region)
        )[:1]
        fast = (
            offers.fabric[row] in ("efa", "infiniband", "roce") or offers.network_gbps[row] >= 100
        )
        assert fast, plan.instance_type
    (line,) = [r for r in result.rejected if "network_tier" in r.reason]
    assert line.reason.startswith("resources.network_tier: best asks for EFA, InfiniBand, RoCE")
    assert "these have ethernet" in line.reason and line.offers > 0
    standard = run_plan(bundled, top=50, resources={"accelerators": "H100:8",
                                                    "network_tier": "standard"})  # fmt: skip
    plain = run_plan(bundled, top=50, resources={"accelerators": "H100:8"})
    assert standard.offers_feasible == plain.offers_feasible > result.offers_feasible
    assert not any("network_tier" in r.reason for r in standard.rejected)
    _accounted(result)
