"""`gpulease plan` and `gpulease schema` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, Cli

# the planning examples (the launch examples target the local provider, which has no catalog offers)
EXAMPLES = sorted(
    p.name for p in (ROOT / "examples").glob("*.yaml") if "workload:" in p.read_text()
)
PLAN_KEYS = {
    "provider",
    "region",
    "zone",
    "instance_type",
    "accelerator",
    "gpus_per_node",
    "num_nodes",
    "pricing",
    "price_per_hour",
    "est_hours",
    "est_cost",
    "gpu_hours",
    "launchable",
    "reasons",
}


@pytest.mark.parametrize("example", ["finetune-7b.yaml", "serve-70b.yaml"])
def test_plan_json_has_the_documented_shape(cli: Cli, example: str) -> None:
    out = cli("plan", f"examples/{example}", "--json", "--top", "3", check=True)
    data = json.loads(out.stdout)
    assert {"plans", "pareto", "rejected"} <= set(data)
    assert 1 <= len(data["plans"]) <= 3
    for plan in data["plans"]:
        assert set(plan) >= PLAN_KEYS
        assert plan["pricing"] in {"on_demand", "spot", "reserved"}
        for key in ("est_hours", "est_cost", "gpu_hours"):
            assert set(plan[key]) == {"low", "expected", "high"}
            assert plan[key]["low"] <= plan[key]["expected"] <= plan[key]["high"]
        assert plan["launchable"] is False and plan["reasons"]
    for rejection in data["rejected"]:
        assert set(rejection) == {"reason", "offers"} and rejection["offers"] > 0


def test_every_example_plans(cli: Cli) -> None:
    assert EXAMPLES
    for example in EXAMPLES:
        data = json.loads(cli("plan", f"examples/{example}", "--json", check=True).stdout)
        assert data["plans"], example


def test_plan_table_shows_plans_reasons_and_rejections(cli: Cli) -> None:
    out = cli("plan", "examples/pretrain-1.3b-spot.yaml", check=True).stdout
    assert "top plans (cheapest)" in out and "Pareto front" in out
    assert "Rejected" in out and "#1" in out and "spot at $" in out


def test_objective_fastest_is_faster_than_cheapest(cli: Cli) -> None:
    def first(*extra: str) -> dict[str, dict[str, float]]:
        out = cli("plan", "examples/pretrain-1.3b-spot.yaml", "--json", *extra, check=True)
        return json.loads(out.stdout)["plans"][0]  # type: ignore[no-any-return]

    assert (
        first("--objective", "fastest")["est_hours"]["expected"] < first()["est_hours"]["expected"]
    )


def test_plan_on_a_t4_task_picks_an_x86_64_host_and_lists_the_arm64_rejection(
    cli: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "t4.yaml"
    task.write_text("name: t4\nresources:\n  accelerators: T4:1\nrun: nvidia-smi\n")
    data = json.loads(cli("plan", str(task), "--json", check=True).stdout)
    assert data["plans"] and {p["cpu_arch"] for p in data["plans"]} == {"x86_64"}
    assert data["plans"][0]["instance_type"] != "g5g.xlarge"
    arm = [r for r in data["rejected"] if r["reason"].startswith("host CPU arm64")]
    assert arm and "g5g.xlarge" in arm[0]["reason"] and "cpu_arch" in arm[0]["reason"]


def test_bad_task_names_field_and_line_with_exit_2(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nresources:\n  accelerators: A100:eight\n", encoding="utf-8")
    out = cli("plan", str(bad))
    assert out.returncode == 2
    assert "resources.accelerators" in out.stderr and ":3" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["plan", "does-not-exist.yaml"], "does-not-exist.yaml"),
        (["plan", "examples/finetune-7b.yaml", "--objective", "slowest"], "objective"),
        (["plan", "examples/finetune-7b.yaml", "--top", "0"], "--top"),
    ],
)
def test_bad_arguments_exit_2_without_traceback(cli: Cli, args: list[str], needle: str) -> None:
    out = cli(*args)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_skypilot_task_plans_with_a_warning(cli: Cli, tmp_path: Path) -> None:
    sky = tmp_path / "sky.yaml"
    sky.write_text(
        "resources:\n  cloud: aws\n  accelerators: {V100: 1}\n  use_spot: true\n"
        "  image_id: ami-123\nrun: python train.py\n",
        encoding="utf-8",
    )
    out = cli("plan", str(sky), check=True)
    assert "image_id" in out.stderr and "warning" in out.stderr
    assert "p3.2xlarge" in out.stdout


def test_schema_is_json_schema_of_the_user_format(cli: Cli) -> None:
    schema = json.loads(cli("schema", check=True).stdout)
    assert "deadline" in schema["properties"] and "resources" in schema["properties"]


def test_no_feasible_plan_exits_1_with_the_rejections(cli: Cli, tmp_path: Path) -> None:
    task = tmp_path / "k8s.yaml"
    task.write_text("resources:\n  infra: k8s\n  accelerators: L4\nrun: echo\n")
    out = cli("plan", str(task))
    assert out.returncode == 1, out.stderr
    assert "no feasible plan" in out.stderr and "no Kubernetes provider yet" in out.stderr
    assert "Rejected" in out.stdout and "Traceback" not in out.stderr
    as_json = cli("plan", str(task), "--json")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["plans"] == []


def test_fastest_without_a_workload_needs_the_run_time(cli: Cli, tmp_path: Path) -> None:
    task = tmp_path / "l4.yaml"
    task.write_text("resources:\n  accelerators: L4\nrun: python serve.py\n")
    refused = cli("plan", str(task), "-o", "fastest")
    assert refused.returncode == 2 and "--hours" in refused.stderr
    out = cli("plan", str(task), "-o", "fastest", "--hours", "10", "--json", check=True)
    plans = json.loads(out.stdout)["plans"]
    assert plans and {(p["accelerator"], p["gpus_per_node"]) for p in plans} == {("L4", 1)}
    on_demand = [p for p in plans if p["pricing"] == "on_demand"]
    assert on_demand[0]["est_hours"]["expected"] == 10.0
    assert on_demand[0]["est_cost"]["expected"] == pytest.approx(
        10 * on_demand[0]["price_per_hour"]
    )
    costs = [p["est_cost"]["expected"] for p in on_demand]
    assert costs == sorted(costs)  # the same time everywhere: the cheapest first


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--hours", "0"], "hours: the run time must be a positive number"),
        (["--hours", "nan"], "hours: the run time must be a positive number"),
    ],
)
def test_bad_run_hours_exit_2(cli: Cli, args: list[str], needle: str) -> None:
    out = cli("plan", "examples/quickstart.yaml", *args)
    assert out.returncode == 2 and needle in out.stderr
    with_workload = cli("plan", "examples/finetune-7b.yaml", "--hours", "3")
    assert with_workload.returncode == 2 and "has a workload" in with_workload.stderr


def test_plan_warns_about_an_env_without_a_value_and_takes_env_options(
    cli: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "gated.yaml"
    task.write_text("resources:\n  accelerators: T4:1\nenvs:\n  HF_TOKEN:\nrun: echo\n")
    out = cli("plan", str(task), "--json", check=True)
    (warning,) = json.loads(out.stdout)["warnings"]
    assert (
        "gated.yaml:4: envs.HF_TOKEN: has no value and is left out (pass --env HF_TOKEN=… "
        "or set HF_TOKEN in the environment); it looks like a secret: give it under secrets:"
    ) in warning
    given = cli("plan", str(task), "--json", "--env", "HF_TOKEN=x", check=True)
    (warning,) = json.loads(given.stdout)["warnings"]  # only the pointer to secrets: (issue 20)
    assert "envs.HF_TOKEN: looks like a secret" in warning


def test_plan_says_once_that_a_disk_tier_is_ignored_off_aws_and_filters_network_tier(
    cli: Cli, tmp_path: Path
) -> None:
    task = tmp_path / "tiers.yaml"
    task.write_text("resources:\n  disk_tier: high\nrun: echo\n")
    data = json.loads(cli("plan", str(task), "--json", check=True).stdout)
    assert data["warnings"] == [
        "resources.disk_tier: high is honoured on aws only (the root EBS volume's type); "
        "local ignores it"
    ]
    task.write_text("resources:\n  accelerators: L4:auto\n  network_tier: best\nrun: echo\n")
    out = cli("plan", str(task), "--top", "50", check=True).stdout
    assert "resources.network_tier: best asks for EFA, InfiniBand, RoCE or ≥ 100 Gbps" in out
    data = json.loads(cli("plan", str(task), "--json", "--top", "50", check=True).stdout)
    assert data["plans"] and not any(p["provider"] == "local" for p in data["plans"])
    assert any("resources.network_tier" in r["reason"] for r in data["rejected"])
    bad = cli("plan", str(task), "--env", "bad-name=1")
    assert bad.returncode == 2 and "--env: 'bad-name'" in bad.stderr
