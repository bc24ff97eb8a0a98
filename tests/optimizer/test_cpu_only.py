"""CPU-only tasks over the bundled catalog: a task without accelerators, instance type or
workload plans CPU instances (GPU offers rejected with one line), one with a workload still
plans GPUs, an explicit instance type is honoured; plans render in ``gpulease plan`` (table and
``--json``, the CLI in process) and launch with no accelerator (the sim provider re-sells the
catalog's CPU offers too)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from gpulease.catalog import Catalog
from gpulease.cli.main import app
from gpulease.optimizer import PlanResult
from gpulease.providers.local import LocalProvider
from gpulease.providers.registry import runtime_catalog
from gpulease.providers.sim import SimProvider
from gpulease.server.planning import launch_targets, target_of
from tests.optimizer.conftest import PRETRAIN, make_task, run_plan

NO_GPU = "has GPUs, the task asks for none"
NEEDS_GPU = "CPU only, the workload needs a GPU"


@pytest.fixture(scope="module")
def bundled() -> Catalog:
    return Catalog.load(bundled_only=True)


def _reasons(result: PlanResult) -> list[str]:
    return [r.reason for r in result.rejected]


def _cpu_offers(catalog: Catalog, provider: str) -> Any:
    o = catalog.offers
    return (o.provider == provider) & (o.gpu_count == 0) & (o.cpu_arch == "x86_64")


def test_a_cpu_service_plans_the_cheapest_two_vcpu_instance(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, resources={"cpus": "2+", "providers": ["aws"]})
    assert result.plans and all(p.cpu_only and p.accelerator == "CPU" for p in result.plans)
    first = result.plans[0]
    assert first.instance_type in {"c6i.large", "m6i.large"} and first.vcpus == 2
    o = bundled.offers
    assert first.price_per_hour == pytest.approx(
        float(np.min(o.price_on_demand[_cpu_offers(bundled, "aws")]))
    )
    (line,) = [r for r in result.rejected if r.reason.startswith(NO_GPU)]
    assert "g4dn.xlarge" in line.reason or "g4dn" in line.reason
    assert line.reason.endswith("(add resources.accelerators to use a GPU)")
    assert line.offers == int(np.count_nonzero((o.provider == "aws") & (o.gpu_count > 0) & (
        o.cpu_arch == "x86_64")))  # fmt: skip
    assert first.reasons[1] == f"{first.instance_type}: 2 vCPUs, 4 GB RAM, CPU only"


def test_exactly_two_vcpus_finds_them(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, resources={"cpus": 2, "providers": ["aws", "gcp"]})
    assert result.plans and {p.vcpus for p in result.plans} == {2.0}
    assert {p.provider for p in result.plans} == {"aws", "gcp"}
    assert any("cpus: 2 vCPUs asked per node" in r for r in _reasons(result))


def test_cpus_and_memory_are_both_respected(bundled: Catalog) -> None:
    result = run_plan(
        bundled, top=50, resources={"cpus": "4+", "memory": "16+", "providers": ["aws"]}
    )
    assert result.plans
    assert all(p.cpu_only and p.vcpus and p.vcpus >= 4 for p in result.plans)
    assert all(p.ram_gb and p.ram_gb >= 16 for p in result.plans)
    # c6i.xlarge has 8 GB of RAM, c6i.2xlarge costs more
    assert result.plans[0].instance_type == "m6i.xlarge"


@pytest.mark.parametrize("objective", ["cheapest", "fastest", "price-per-tflop"])
def test_every_objective_picks_a_cpu_instance_for_a_cpu_service(
    bundled: Catalog, objective: str
) -> None:
    """Before CPU offers, ``-o fastest`` planned 8×H100 for a CPU service (fastest now needs the
    run time of a task without a workload)."""
    hours = 5.0 if objective == "fastest" else None
    result = run_plan(bundled, objective=objective, hours=hours, resources={"cpus": "2+"})
    assert result.plans and all(p.cpu_only for p in result.plans)
    assert all(p.peak_tflops == 0 and p.gpus_per_node == 0 for p in result.plans)


def test_a_workload_without_accelerators_still_plans_gpus(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, workload=PRETRAIN, resources={"providers": ["aws"]})
    assert result.plans and all(p.gpus_per_node > 0 for p in result.plans)
    (line,) = [r for r in _reasons(result) if r.startswith(NEEDS_GPU)]
    assert "c6i.large" in line or "m6i" in line or "c6i" in line
    assert not any(r.startswith(NO_GPU) for r in _reasons(result))


@pytest.mark.parametrize("instance_type", ["c6i.large", "g4dn.xlarge"])
def test_an_explicit_instance_type_is_honoured_whatever_it_is(
    bundled: Catalog, instance_type: str
) -> None:
    result = run_plan(bundled, resources={"instance_type": instance_type})
    assert result.plans and {p.instance_type for p in result.plans} == {instance_type}
    assert not any(r.startswith((NO_GPU, NEEDS_GPU)) for r in _reasons(result))


def test_named_accelerators_leave_cpu_instances_out(bundled: Catalog) -> None:
    result = run_plan(bundled, top=50, resources={"accelerators": "T4:1", "providers": ["aws"]})
    assert result.plans and all(p.accelerator == "T4" for p in result.plans)
    (line,) = [r for r in result.rejected if r.reason.startswith("accelerator not requested")]
    assert line.offers >= np.count_nonzero(bundled.offers.gpu_count == 0)  # CPU ones among them
    assert not any(r.startswith((NO_GPU, NEEDS_GPU)) for r in _reasons(result))


def test_arm64_cpu_instances_on_request(bundled: Catalog) -> None:
    result = run_plan(bundled, resources={"cpu_arch": "arm64", "providers": ["aws"]})
    assert result.plans and {p.instance_type.split(".")[0] for p in result.plans} <= {
        "m7g", "c7g",
    }  # fmt: skip
    assert result.plans[0].reasons[1].endswith("CPU only, arm64 host")


def test_the_plan_json_states_a_cpu_plan(bundled: Catalog) -> None:
    plan = run_plan(bundled, resources={"cpus": "2+", "providers": ["gcp"]}).plans[0]
    data = plan.to_dict()
    assert data["cpu_only"] is True and data["gpus_per_node"] == 0 and data["part"] == "cpu"
    assert data["accelerator"] == "CPU" and data["gpu_memory_gb"] == 0
    assert data["instance_type"] == "n2-standard-2" and (data["vcpus"], data["ram_gb"]) == (2, 8)
    gpu = run_plan(bundled, resources={"accelerators": "T4:1"}).plans[0].to_dict()
    assert gpu["cpu_only"] is False and gpu["vcpus"] and gpu["ram_gb"]


def _plan_cli(tmp_path: Path, task: str, *args: str) -> Any:
    path = tmp_path / "task.yaml"
    path.write_text(task)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    result = CliRunner().invoke(
        app, ["plan", str(path), *args], env={"GPULEASE_HOME": str(home), "COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    return result


SKYPILOT_CPU_TASK = "resources:\n  cloud: aws\n  cpus: 2+\nrun: echo hi\n"  # the issue's file


def test_plan_renders_a_cpu_plan_in_the_table(tmp_path: Path) -> None:
    out = _plan_cli(tmp_path, SKYPILOT_CPU_TASK).output
    row = next(line for line in out.splitlines() if "│ 1 " in line)
    assert "CPU only" in row and ("c6i.large" in row or "m6i.large" in row)
    assert "2 vCPUs, 4 GB RAM, CPU only" in out or "2 vCPUs, 8 GB RAM, CPU only" in out
    assert NO_GPU in out and "g4dn" in out.split(NO_GPU, 1)[1].splitlines()[0]
    assert "T4" not in row


def test_plan_json_of_the_issues_cpu_task(tmp_path: Path) -> None:
    data = json.loads(_plan_cli(tmp_path, SKYPILOT_CPU_TASK, "--json").stdout)
    first = data["plans"][0]
    assert first["provider"] == "aws" and first["cpu_only"] and first["vcpus"] == 2
    assert first["instance_type"] in {"c6i.large", "m6i.large"}
    assert all(p["gpus_per_node"] == 0 for p in data["plans"] + data["pareto"])
    assert any(r["reason"].startswith(NO_GPU) for r in data["rejected"])


def test_a_cpu_plan_launches_with_no_accelerator(bundled: Catalog, tmp_path: Path) -> None:
    plan = run_plan(bundled, resources={"cpus": "2+", "providers": ["aws"]}).plans[0]
    target = target_of(plan)
    assert target.accelerator is None and target.gpus_per_node == 0
    assert target.instance_type == plan.instance_type and target.provider == "aws"
    local = runtime_catalog({"local": LocalProvider(tmp_path / "l", gpus=2)}, base=bundled)
    (first, *_) = launch_targets(make_task(), local, frozenset({"local"}))
    assert (first.instance_type, first.accelerator, first.gpus_per_node) == ("local-cpu", None, 0)


def test_the_sim_provider_resells_cpu_offers(bundled: Catalog, tmp_path: Path) -> None:
    sim = SimProvider.from_config({}, tmp_path / "sim")
    catalog = runtime_catalog({"sim": sim}, base=bundled)
    sold = catalog.offers.provider == "sim"
    assert np.count_nonzero(sold & (catalog.offers.gpu_count == 0)) == np.count_nonzero(
        bundled.offers.gpu_count == 0
    )
    task = make_task(resources={"cpus": "4+", "providers": ["sim"]})
    targets = launch_targets(task, catalog, frozenset({"sim"}))
    assert targets and all(t.accelerator is None and t.gpus_per_node == 0 for t in targets)
    assert targets[0].provider == "sim"
    gpu = launch_targets(make_task(resources={"accelerators": "T4:1", "providers": ["sim"]}),
                         catalog, frozenset({"sim"}))  # fmt: skip
    assert gpu[0].accelerator == "T4" and gpu[0].gpus_per_node == 1
