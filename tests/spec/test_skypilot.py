"""SkyPilot task YAML: accepted as is, with a warning for each field gpulease does not honour."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpulease.errors import SpecError
from gpulease.spec import (
    AcceleratorRequest,
    SpecWarning,
    load_task,
    load_task_with_warnings,
    parse_task,
    parse_task_with_warnings,
)
from gpulease.units import Minimum

from .conftest import FIXTURES, SKYPILOT_EXAMPLES


def _parse(text: str) -> tuple[object, list[str]]:
    return parse_task_with_warnings(textwrap.dedent(text), "sky.yaml")


@pytest.mark.parametrize("path", SKYPILOT_EXAMPLES, ids=lambda p: p.stem)
def test_skypilot_examples_load_and_say_they_were_read_as_skypilot(path: Path) -> None:
    _, messages = load_task_with_warnings(path)
    assert messages[0].startswith(f"{path}: read as a SkyPilot task (SkyPilot fields: ")


def test_basic_skypilot_task() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "skypilot" / "basic.yaml")
    assert task.name == "llm-finetune"
    assert task.num_nodes == 2
    assert task.resources.providers == ["aws"]
    assert task.resources.accelerators == AcceleratorRequest(choices={"A100": 8})
    assert task.resources.disk == Minimum(512)
    assert task.resources.use_spot is True
    assert task.workdir == "."
    assert task.file_mounts == {"/data": "s3://my-bucket/data"}
    assert task.envs == {"MODEL_NAME": "meta-llama/Llama-2-7b-hf", "BATCH_SIZE": "32"}
    assert task.setup is not None
    assert task.run is not None
    assert "resources.cloud, resources.disk_size)" in messages[0]
    assert task.resources.image_id == "docker:nvcr.io/nvidia/pytorch:24.01-py3"
    rest = "\n".join(messages[1:])
    assert "image_id" not in rest
    assert task.resources.ports == [8080]
    assert "resources.ports" not in rest
    assert ":14: file_mounts./checkpoints: ignored" in rest
    assert ":25: envs.HF_TOKEN: has no value" in rest


def test_warnings_are_in_line_order() -> None:
    _, messages = load_task_with_warnings(FIXTURES / "skypilot" / "basic.yaml")
    lines = [int(message.split(":")[1]) for message in messages[1:]]
    assert lines == sorted(lines)


def test_infra_and_set_form() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "skypilot" / "infra_set.yaml")
    assert task.resources.providers == ["aws"]
    assert task.resources.regions == ["us-east-1"]
    assert task.resources.accelerators == AcceleratorRequest(choices={"A100": 8, "H100": 8})
    assert task.resources.cpus == Minimum(32, at_least=True)
    assert task.resources.memory == Minimum(256, at_least=True)
    assert task.resources.max_price_per_hour == 50.0
    assert task.resources.zones == ["us-east-1a"]
    assert not any("zone" in message for message in messages)


def test_ordered_candidates_become_a_preference_list() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "skypilot" / "ordered.yaml")
    assert task.resources.accelerators == AcceleratorRequest(
        choices={"H100": 8, "A100-80GB": 8}, ordered=True
    )
    assert task.resources.providers == ["aws", "gcp"]
    assert task.resources.regions == ["us-east-1", "us-central1"]
    assert task.resources.use_spot is True
    assert task.job_recovery is not None
    assert task.job_recovery.strategy == "next_region"
    assert task.job_recovery.max_restarts_on_errors == 3
    candidates = task.resources.candidates
    assert candidates is not None and len(candidates) == 2  # each accelerator keeps its cloud
    assert (candidates[0].providers, candidates[0].regions) == (["aws"], ["us-east-1"])
    assert candidates[0].accelerators == AcceleratorRequest(choices={"H100": 8})
    assert (candidates[1].providers, candidates[1].regions) == (["gcp"], ["us-central1"])
    joined = "\n".join(messages)
    assert "resources.job_recovery.recover_on_exit_codes: ignored" in joined


def test_any_of_candidates_become_a_choice() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "skypilot" / "any_of.yaml")
    assert task.resources.accelerators == AcceleratorRequest(
        choices={"A10G": 1, "L4": 1, "T4": 4}, ordered=False
    )
    assert task.resources.use_spot is True
    assert task.resources.disk == Minimum(100)
    assert any("resources.any_of[2].disk_size: differs" in message for message in messages)


def test_service_on_kubernetes() -> None:
    task, messages = load_task_with_warnings(FIXTURES / "skypilot" / "service_k8s.yaml")
    assert task.resources.providers == ["kubernetes"]
    assert task.resources.accelerators == AcceleratorRequest(choices={"L4": 1})
    assert task.service is not None
    assert task.service.port == 8000  # the first of resources.ports
    assert task.service.readiness_probe.path == "/v1/models"
    assert (task.service.replicas.min, task.service.replicas.max) == (2, 2)
    joined = "\n".join(messages)
    assert "config: ignored" in joined
    assert ": secrets" not in joined  # read (issue 20): HF_TOKEN is given at launch
    assert task.secrets == {"HF_TOKEN": None}
    assert ": service" not in joined and "resources.ports" not in joined
    assert "kubernetes context 'my-context' is ignored" in joined


def test_a_name_without_count_means_one_unless_a_workload_is_sized() -> None:
    task, _ = _parse("resources:\n  cloud: aws\n  accelerators: V100\n")
    assert task.resources.accelerators == AcceleratorRequest(choices={"V100": 1})  # type: ignore[attr-defined]
    native = parse_task("resources:\n  provider: aws\n  accelerators: V100\n")
    assert native.resources.accelerators == AcceleratorRequest(choices={"V100": 1})
    sized = parse_task(
        "resources:\n  accelerators: V100\nworkload:\n  model: {params: 7B}\n  tokens: 1B\n"
    )
    assert sized.resources.accelerators == AcceleratorRequest(choices={"V100": None})
    asked = parse_task("resources:\n  accelerators: V100:auto\n")
    assert asked.resources.accelerators == AcceleratorRequest(choices={"V100": None})


@pytest.mark.parametrize(
    ("infra", "providers", "regions"),
    [
        ("aws", ["aws"], None),
        ("AWS/us-east-1", ["aws"], ["us-east-1"]),
        ("gcp/us-central1/us-central1-a", ["gcp"], ["us-central1"]),
        ("'*/us-east-1'", None, ["us-east-1"]),
        ("k8s", ["kubernetes"], None),
        ("kubernetes/ctx/with/slashes", ["kubernetes"], None),
    ],
)
def test_infra_strings(infra: str, providers: list[str] | None, regions: list[str] | None) -> None:
    task, _ = _parse(f"resources:\n  infra: {infra}\n")
    assert task.resources.providers == providers  # type: ignore[attr-defined]
    assert task.resources.regions == regions  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("image_id", "skypilot:gpu-ubuntu-2204"),
        ("labels", "{team: ml}"),
        ("accelerator_args", "{tpu_vm: true}"),
        ("priority", "5"),
        ("_cluster_config_overrides", "{}"),
    ],
)
def test_resource_fields_gpulease_cannot_honour_are_named_in_a_warning(
    field: str, value: str
) -> None:
    task, messages = _parse(f"resources:\n  accelerators: A100:8\n  {field}: {value}\n")
    assert task.resources.accelerators is not None  # type: ignore[attr-defined]
    assert any(f"sky.yaml:3: resources.{field}: ignored" in message for message in messages)
    assert f"resources.{field}" in messages[0]


@pytest.mark.parametrize("field", ["config", "volumes", "event_callback", "inputs"])
def test_top_level_fields_gpulease_cannot_honour_are_named_in_a_warning(field: str) -> None:
    _, messages = _parse(f"{field}: {{}}\nrun: echo hi\n")
    assert any(f"sky.yaml:1: {field}: ignored" in message for message in messages)


def test_git_workdir_is_ignored_with_a_warning() -> None:
    task, messages = _parse("workdir: {url: https://github.com/x/y, ref: main}\n")
    assert task.workdir is None  # type: ignore[attr-defined]
    assert any("workdir: ignored" in message for message in messages)


def test_spot_recovery_old_name_and_string_form() -> None:
    task, _ = _parse("resources:\n  use_spot: true\n  spot_recovery: FAILOVER\n")
    assert task.job_recovery.strategy == "same_region"  # type: ignore[attr-defined]


def test_parse_task_emits_warnings_as_spec_warnings() -> None:
    with pytest.warns(SpecWarning) as record:
        parse_task("resources:\n  image_id: my-image\n", "sky.yaml")
    assert [str(warning.message) for warning in record] == [
        "sky.yaml: read as a SkyPilot task (SkyPilot fields: resources.image_id)",
        "sky.yaml:2: resources.image_id: ignored (SkyPilot field that gpulease does not honour: "
        "only AWS AMI ids (ami-…) are honoured)",
    ]


def test_load_task_emits_warnings_as_spec_warnings() -> None:
    path = FIXTURES / "skypilot" / "basic.yaml"
    with pytest.warns(SpecWarning) as record:
        load_task(path)
    _, messages = load_task_with_warnings(path)
    assert [str(warning.message) for warning in record] == messages


@pytest.mark.parametrize(
    ("text", "field", "line", "message"),
    [
        (
            "resources:\n  cloud: aws\n  infra: gcp\n",
            "resources.infra",
            3,
            "conflicts with resources.cloud",
        ),
        ("resources:\n  providers: [aws]\n  cloud: gcp\n", "resources.cloud", 3, "conflicts"),
        ("resources:\n  region: a\n  regions: [b]\n", "resources.regions", 3, "conflicts"),
        ("resources:\n  cloud: 5\n", "resources.cloud", 2, "expected a name"),
        ("resources:\n  disk_size: -5\n", "resources.disk_size", 2, "negative"),
        ("resources:\n  max_hourly_cost: free\n", "resources.max_hourly_cost", 2, "amount"),
        ("resources:\n  any_of: []\n", "resources.any_of", 2, "list of resource mappings"),
        ("resources:\n  any_of: [A100]\n", "resources.any_of", 2, "list of resource mappings"),
        (
            "resources:\n  any_of:\n    - accelerators: A100:8\n    - accelerators: B9000:8\n",
            "resources.any_of[1].accelerators",
            4,
            "unknown accelerator 'B9000'",
        ),
        (
            "resources:\n  any_of: [{accelerators: A100}]\n  ordered: [{accelerators: H100}]\n",
            "resources.ordered",
            3,
            "either any_of or ordered",
        ),
        (
            "resources:\n  cloud: aws\n  any_of:\n    - {cloud: gcp, accelerators: A100}\n",
            "resources.any_of[0].cloud",
            4,
            "conflicts with resources.cloud",
        ),
        (
            "resources:\n  job_recovery: {max_restarts_on_errors: -1}\n",
            "resources.job_recovery.max_restarts_on_errors",
            2,
            "at least 0",
        ),
        (
            "resources:\n  job_recovery: next_region\njob_recovery: same_region\n",
            "resources.job_recovery",
            2,
            "conflicts with job_recovery",
        ),
        (
            "resources:\n  any_of:\n    - {accelerators: A100:8, use_spot: maybe}\n",
            "resources.any_of[0].use_spot",
            3,
            "true, false or auto",
        ),
        (
            "resources:\n  cloud: aws\n  accelerators: A100:x\n",
            "resources.accelerators",
            3,
            "count",
        ),
    ],
)
def test_errors_in_skypilot_fields_name_what_the_user_wrote(
    text: str, field: str, line: int, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        parse_task_with_warnings(text, "sky.yaml")
    assert (info.value.field, info.value.line) == (field, line)
    assert message in info.value.message


# --- issue 14: what real SkyPilot files use ------------------------------------------------------


def test_a_set_with_one_name_at_several_counts_means_any_of_them() -> None:
    task, _ = _parse("resources:\n  accelerators: {A100:4, A100:8, A100-80GB:2}\n")
    request = task.resources.accelerators  # type: ignore[attr-defined]
    assert request.options == (("A100", 4), ("A100", 8), ("A100-80GB", 2))
    assert not request.ordered
    assert request.counts_of("A100") == (4, 8)


def test_any_of_spot_and_on_demand_means_either() -> None:
    task, messages = _parse(
        """\
        resources:
          accelerators: A100:8
          any_of:
            - use_spot: true
            - use_spot: false
        """
    )
    assert task.resources.use_spot == "auto"  # type: ignore[attr-defined]
    assert task.resources.accelerators == AcceleratorRequest(choices={"A100": 8})  # type: ignore[attr-defined]
    assert not any("ignored" in message or "differs" in message for message in messages[1:])


def test_ordered_entries_with_only_a_region_join_the_cloud_in_resources() -> None:
    task, _ = _parse(
        """\
        resources:
          cloud: aws
          accelerators: A100:8
          ordered:
            - region: us-east-1
            - region: us-west-2
        """
    )
    assert task.resources.providers == ["aws"]  # type: ignore[attr-defined]
    assert task.resources.regions == ["us-east-1", "us-west-2"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "zones", "regions"),
    [
        ("resources:\n  zone: us-east-1a\n", ["us-east-1a"], None),
        ("resources:\n  infra: aws/us-east-1/us-east-1b\n", ["us-east-1b"], ["us-east-1"]),
        (
            "resources:\n  any_of:\n    - {zone: us-central1-a}\n    - {zone: us-central1-b}\n",
            ["us-central1-a", "us-central1-b"],
            None,
        ),
    ],
)
def test_zones_are_honoured(text: str, zones: list[str], regions: list[str] | None) -> None:
    task, messages = _parse(text)
    assert task.resources.zones == zones  # type: ignore[attr-defined]
    assert task.resources.regions == regions  # type: ignore[attr-defined]
    assert not any("zone" in message and "ignored" in message for message in messages)


@pytest.mark.parametrize("where", ["cloud: kubernetes", "infra: k8s", "infra: k8s/my-context"])
def test_kubernetes_is_named_as_not_there_yet(where: str) -> None:
    task, messages = _parse(f"resources:\n  {where}\n  accelerators: L4\n")
    assert task.resources.providers == ["kubernetes"]  # type: ignore[attr-defined]
    assert any("gpulease has no Kubernetes provider yet" in message for message in messages)


def test_any_of_entries_without_a_shared_place_keep_their_pairs() -> None:
    task, messages = _parse(
        """\
        resources:
          any_of:
            - {cloud: aws, region: us-east-1, accelerators: A100:8}
            - {cloud: gcp, accelerators: T4:4}
            - {cloud: aws}
        """
    )
    res = task.resources  # type: ignore[attr-defined]
    assert res.providers == ["aws", "gcp"] and res.regions is None  # only us-east-1 is paired
    assert [
        (c.accelerators and c.accelerators.options, c.providers, c.regions) for c in res.candidates
    ] == [
        ((("A100", 8),), ["aws"], ["us-east-1"]),
        ((("T4", 4),), ["gcp"], None),
        (None, ["aws"], None),  # no accelerators: a CPU instance
    ]
    assert not any("allowed in every" in message for message in messages)


def test_entries_sharing_their_place_are_pooled_without_candidates() -> None:
    task, _ = load_task_with_warnings(FIXTURES / "skypilot" / "any_of.yaml")
    assert task.resources.candidates is None


def test_a_pipeline_file_is_named_as_not_supported_yet() -> None:
    with pytest.raises(SpecError, match="pipelines are not supported yet") as info:
        _parse("name: pipeline\n---\nname: a\nrun: echo a\n---\nname: b\nrun: echo b\n")
    assert info.value.line == 2
