"""Reading gpulease task YAML: every field, every accepted form, the example tasks."""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest

from gpulease.spec import (
    AcceleratorRequest,
    CheckpointSpec,
    JobRecovery,
    ModelSpec,
    Resources,
    Task,
    Workload,
    load_task,
    load_task_with_warnings,
    parse_task,
    task_from_dict,
)
from gpulease.units import Minimum

from .conftest import FIXTURES, NATIVE_EXAMPLES

FULL = """\
name: everything
resources:
  accelerators: A100-80GB:8
  cpus: 32+
  memory: 256GB+
  disk: 500
  use_spot: auto
  providers: [AWS, sim]
  regions: us-east-1
  exclude_providers: k8s
  exclude_regions: [eu-west-1]
  instance_type: p4de.24xlarge
  max_price_per_hour: $45.50
  commitment: 1y
  provider_config: {aws: {profile: research}}
num_nodes: 2
workload:
  kind: finetune
  model: {params: 7B, arch: transformer, layers: 32, hidden: 4096, kv_heads: 8, heads: 32}
  tokens: 1B
  seq_len: 4096
  global_batch: 256
  precision: bf16
  sharding: fsdp
  epochs: 2
deadline: 36h
budget: $500
data_policy: pii
workdir: ./src
file_mounts: {/data: s3://bucket/data}
setup: pip install -e .
run: |
  python train.py
envs: {HF_HOME: /cache, PORT: 8080, DEBUG: true}
checkpoint: {dir: /ckpt, store: s3://bucket/ckpt, sync_interval: 5m}
job_recovery: {strategy: same_region, max_restarts_on_errors: 2, zone_cooldown: 1h}
"""


def test_every_field_of_the_format_is_read() -> None:
    task = parse_task(FULL, "full.yaml")
    assert task == Task(
        name="everything",
        resources=Resources(
            accelerators=AcceleratorRequest(choices={"A100-80GB": 8}),
            cpus=Minimum(32, at_least=True),
            memory=Minimum(256, at_least=True),
            disk=Minimum(500),
            use_spot="auto",
            providers=["aws", "sim"],
            regions=["us-east-1"],
            exclude_providers=["kubernetes"],
            exclude_regions=["eu-west-1"],
            instance_type="p4de.24xlarge",
            max_price_per_hour=45.5,
            commitment="1y",
            provider_config={"aws": {"profile": "research"}},
        ),
        num_nodes=2,
        workload=Workload(
            kind="finetune",
            model=ModelSpec(params=7e9, layers=32, hidden=4096, kv_heads=8, heads=32),
            tokens=1e9,
            seq_len=4096,
            global_batch=256,
            sharding="fsdp",
            epochs=2,
        ),
        deadline_hours=36.0,
        budget_usd=500.0,
        data_policy=["pii"],
        workdir="./src",
        file_mounts={"/data": "s3://bucket/data"},
        setup="pip install -e .",
        run="python train.py\n",
        envs={"HF_HOME": "/cache", "PORT": "8080", "DEBUG": "true"},
        checkpoint=CheckpointSpec(
            dir="/ckpt", store="s3://bucket/ckpt", sync_interval_hours=5 / 60
        ),
        job_recovery=JobRecovery(
            strategy="same_region", max_restarts_on_errors=2, zone_cooldown_hours=1.0
        ),
    )


def test_empty_values_mean_the_default() -> None:
    text = "name:\nresources:\nenvs:\nfile_mounts:\ndeadline:\ncheckpoint:\n  dir:\n"
    assert parse_task(text) == Task(checkpoint=CheckpointSpec())
    assert parse_task("resources:\n  use_spot:\n  cpus:\n").resources == Resources()


def test_an_empty_mapping_is_a_task_with_defaults() -> None:
    task = parse_task("{}")
    assert task == Task()
    assert task.resources.use_spot is False
    assert task.resources.exclude_providers == []


@pytest.mark.parametrize("path", NATIVE_EXAMPLES, ids=lambda p: p.stem)
def test_native_examples_load_without_warnings(path: Path) -> None:
    task, messages = load_task_with_warnings(path)
    assert messages == []
    assert task.workload is not None
    assert task.resources.accelerators is not None


def test_finetune_example() -> None:
    task = load_task(FIXTURES / "native" / "finetune_7b.yaml")
    assert task.deadline_hours == 24.0
    assert task.budget_usd == 500.0
    assert task.workload is not None
    assert task.workload.kind == "finetune"
    assert task.workload.model.params == 7e9
    assert task.workload.tokens == 1e9
    assert task.resources.accelerators == AcceleratorRequest(
        choices={"A100-80GB": 8, "H100": 8}, ordered=False
    )
    assert task.checkpoint is not None
    assert task.checkpoint.sync_interval_hours == pytest.approx(5 / 60)


def test_pretrain_on_spot_example() -> None:
    task = load_task(FIXTURES / "native" / "pretrain_1_3b_spot.yaml")
    assert task.resources.use_spot is True
    assert task.workload is not None
    assert task.workload.model.params == 1.3e9
    assert task.workload.tokens == 26e9
    accelerators = task.resources.accelerators
    assert accelerators is not None
    assert accelerators.ordered
    assert accelerators.names == ("H100", "A100-80GB", "A100")
    assert task.resources.disk == Minimum(1024)
    assert task.resources.max_price_per_hour == 40.0
    assert task.deadline_hours == 72.0
    assert task.job_recovery is not None
    assert task.job_recovery.zone_cooldown_hours == 0.5


def test_serve_70b_example() -> None:
    task = load_task(FIXTURES / "native" / "serve_70b.yaml")
    assert task.workload is not None
    assert task.workload.kind == "inference"
    assert task.workload.model.params == 70e9
    assert task.workload.precision == "bf16"
    assert task.workload.hours == 720.0
    assert task.resources.providers == ["aws"]
    assert task.resources.regions == ["us-east-1"]


def test_resnet_imagenet_example() -> None:
    task = load_task(FIXTURES / "native" / "resnet50_imagenet.yaml")
    assert task.workload is not None
    assert task.workload.model.arch == "cnn"
    assert task.workload.model.params == pytest.approx(25.6e6)
    assert task.workload.samples == pytest.approx(1.28e6)
    assert task.workload.flops_per_sample == pytest.approx(12.3e9)
    assert task.workload.epochs == 90


def _resources(yaml_text: str) -> Resources:
    return parse_task("resources:\n" + textwrap.indent(yaml_text, "  ")).resources


@pytest.mark.parametrize(
    ("text", "choices", "ordered"),
    [
        ("accelerators: A100:8", {"A100": 8}, False),
        ("accelerators: A100", {"A100": 1}, False),  # SkyPilot's meaning: one, without a workload
        ("accelerators: A100:auto", {"A100": None}, False),
        ("accelerators: {A100: 8, H100: 8}", {"A100": 8, "H100": 8}, False),
        ("accelerators: {A100:8, H100:8}", {"A100": 8, "H100": 8}, False),
        ('accelerators: ["H100:8", "A100-80GB:8"]', {"H100": 8, "A100-80GB": 8}, True),
        ("accelerators:\n  - h100:8\n  - a100_80gb:8", {"H100": 8, "A100-80GB": 8}, True),
    ],
)
def test_accelerators_in_each_form(
    text: str, choices: dict[str, int | None], ordered: bool
) -> None:
    assert _resources(text).accelerators == AcceleratorRequest(choices=choices, ordered=ordered)


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("cpus: 8", "cpus", Minimum(8)),
        ("cpus: 8+", "cpus", Minimum(8, at_least=True)),
        ("cpus: '8+'", "cpus", Minimum(8, at_least=True)),
        ("memory: 32GB+", "memory", Minimum(32, at_least=True)),
        ("memory: 64", "memory", Minimum(64)),
        ("disk: 1TB+", "disk", Minimum(1024, at_least=True)),
        ("disk: 256GB", "disk", Minimum(256)),
        ("use_spot: true", "use_spot", True),
        ("use_spot: false", "use_spot", False),
        ("use_spot: auto", "use_spot", "auto"),
        ("use_spot: AUTO", "use_spot", "auto"),
        ("provider: aws", "providers", ["aws"]),
        ("providers: AWS", "providers", ["aws"]),
        ("providers: [aws, k8s]", "providers", ["aws", "kubernetes"]),
        ("region: us-east-1", "regions", ["us-east-1"]),
        ("region: [us-east-1, us-west-2]", "regions", ["us-east-1", "us-west-2"]),
        ("regions: us-east-1", "regions", ["us-east-1"]),
        ("exclude_regions: eu-west-1", "exclude_regions", ["eu-west-1"]),
        ("max_price_per_hour: 12.5", "max_price_per_hour", 12.5),
        ("max_price_per_hour: $12.50", "max_price_per_hour", 12.5),
        ("commitment: 3Y", "commitment", "3y"),
    ],
)
def test_resource_fields_accept_their_forms(text: str, field: str, expected: object) -> None:
    assert getattr(_resources(text), field) == expected


def _workload(extra: str) -> Workload:
    text = "workload:\n  model: {params: 7B}\n  tokens: 1B\n" + textwrap.indent(extra, "  ")
    workload = parse_task(text).workload
    assert workload is not None
    return workload


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        ("kind: Train", "kind", "train"),
        ("kind: fine-tune", "kind", "finetune"),
        ("kind: serve", "kind", "inference"),
        ("precision: BF16", "precision", "bf16"),
        ("sharding: ZeRO3", "sharding", "zero3"),
        ("epochs: 0.5", "epochs", 0.5),
        ("seq_len: '4096'", "seq_len", 4096),
        ("global_batch: 512.0", "global_batch", 512),
        ("requests_per_second: 20", "requests_per_second", 20.0),
        ("hours: 30d", "hours", 720.0),
        ("hours: 12", "hours", 12.0),
        ("flops_per_sample: 12.3e9", "flops_per_sample", 12.3e9),
    ],
)
def test_workload_fields_accept_their_forms(text: str, field: str, expected: object) -> None:
    assert getattr(_workload(text), field) == expected


@pytest.mark.parametrize("params", ["7B", "7e9", "7_000_000_000", 7000000000, "0.007T", "7000M"])
def test_model_params_in_any_notation(params: object) -> None:
    task = task_from_dict({"workload": {"model": {"params": params}, "tokens": "1B"}})
    assert task.workload is not None
    assert task.workload.model.params == pytest.approx(7e9)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("deadline: 36h", 36.0), ("deadline: 3d", 72.0), ("deadline: 90m", 1.5), ("deadline: 8", 8.0)],
)
def test_deadline_is_read_as_hours(text: str, expected: float) -> None:
    assert parse_task(text).deadline_hours == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"), [("budget: $500", 500.0), ("budget: 1,200.50", 1200.5)]
)
def test_budget_is_read_as_dollars(text: str, expected: float) -> None:
    assert parse_task(text).budget_usd == expected


def test_data_policy_is_a_class_or_a_list_of_classes() -> None:
    assert parse_task("data_policy: hipaa").data_policy == ["hipaa"]
    assert parse_task("data_policy: [pii, hipaa]").data_policy == ["pii", "hipaa"]


@pytest.mark.parametrize(
    ("text", "strategy"),
    [
        ("job_recovery: next_region", "next_region"),
        ("job_recovery: {strategy: on-demand-fallback}", "on_demand_fallback"),
        ("job_recovery: {strategy: FAILOVER}", "same_region"),
        ("job_recovery: {strategy: EAGER_NEXT_REGION}", "next_region"),
    ],
)
def test_job_recovery_strategy_spellings(text: str, strategy: str) -> None:
    recovery = parse_task(text).job_recovery
    assert recovery is not None
    assert recovery.strategy == strategy


def test_internal_field_names_are_accepted_too() -> None:
    task = task_from_dict({"deadline_hours": 36, "budget_usd": 500})
    assert (task.deadline_hours, task.budget_usd) == (36.0, 500.0)


def test_model_dump_validates_back_to_the_same_task(fixtures: Path) -> None:
    task = load_task(fixtures / "native" / "pretrain_1_3b_spot.yaml")
    assert Task.model_validate(task.model_dump()) == task
    assert task_from_dict(task.model_dump()) == task
    assert task_from_dict(task.model_dump(mode="json", by_alias=True)) == task


def test_models_built_in_python_parse_their_fields() -> None:
    resources = Resources.model_validate({"accelerators": "h100:8", "cpus": "8+"})
    assert resources.accelerators == AcceleratorRequest(choices={"H100": 8})
    assert resources.cpus == Minimum(8, at_least=True)


def test_yaml_anchors_and_merge_keys_work() -> None:
    text = """\
    resources:
      provider_config:
        base: &base {profile: research, region: us-east-1}
        aws:
          <<: *base
          region: us-west-2
    """
    config = parse_task(textwrap.dedent(text)).resources.provider_config
    assert config["aws"] == {"profile": "research", "region": "us-west-2"}


def test_native_tasks_emit_no_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parse_task(FULL)
