"""SkyPilot fields honoured at launch, on the parse side: envs without a value (filled from
``envs=`` overrides and the caller's environment, required at launch), ``image_id`` (an AWS AMI,
also per region) and ``disk_tier`` / ``network_tier``."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from gpulease.errors import SpecError
from gpulease.spec import (
    Task,
    dump_task,
    load_task,
    parse_task,
    parse_task_with_warnings,
    task_from_dict_with_warnings,
    task_json_schema,
)

SECRET = "hf_s3cr3t_value_never_shown"
TOKENS = """\
name: gated
envs:
  MODEL: llama
  HF_TOKEN:
  WANDB_API_KEY: null
run: echo
"""


def _parse(text: str, **kw: Any) -> tuple[Task, list[str]]:
    return parse_task_with_warnings(textwrap.dedent(text), "sky.yaml", **kw)


# --- envs ----------------------------------------------------------------------------------------


def test_envs_without_a_value_are_left_out_with_a_warning_that_says_how_to_give_them() -> None:
    task, warnings = _parse(TOKENS)
    assert task.envs == {"MODEL": "llama"}
    secret = "; it looks like a secret: give it under secrets: instead"  # issue 20
    assert [w.split(", so that")[0] for w in warnings] == [
        "sky.yaml:4: envs.HF_TOKEN: has no value and is left out "
        "(pass --env HF_TOKEN=… or set HF_TOKEN in the environment)" + secret,
        "sky.yaml:5: envs.WANDB_API_KEY: has no value and is left out "
        "(pass --env WANDB_API_KEY=… or set WANDB_API_KEY in the environment)" + secret,
    ]


def test_envs_without_a_value_come_from_the_callers_environment() -> None:
    environ = {"HF_TOKEN": SECRET, "WANDB_API_KEY": "w", "MODEL": "from-env"}
    task, warnings = _parse(TOKENS, environ=environ, require_envs=True)
    # the file's own value wins over the environment; only value-less entries are looked up
    assert task.envs == {"MODEL": "llama", "HF_TOKEN": SECRET, "WANDB_API_KEY": "w"}
    assert [w.split(": envs.")[1].split(":")[0] for w in warnings] == ["HF_TOKEN", "WANDB_API_KEY"]
    assert all("looks like a secret" in w and SECRET not in w for w in warnings)


def test_overrides_win_over_the_file_and_the_environment_and_may_add_names() -> None:
    task, _ = _parse(
        TOKENS,
        envs={"MODEL": "mistral", "HF_TOKEN": "given", "EXTRA": "1"},
        environ={"HF_TOKEN": "from-env", "WANDB_API_KEY": "w"},
        require_envs=True,
    )
    assert task.envs == {"MODEL": "mistral", "HF_TOKEN": "given", "WANDB_API_KEY": "w",
                         "EXTRA": "1"}  # fmt: skip
    added, _ = _parse("run: echo\n", envs={"PORT": "8080"})
    assert added.envs == {"PORT": "8080"}


def test_at_launch_a_missing_value_is_an_error_naming_each_env_and_line() -> None:
    with pytest.raises(SpecError) as caught:
        _parse(TOKENS, environ={"UNRELATED": SECRET}, require_envs=True)
    error = caught.value
    assert (error.field, error.line, error.source) == ("envs.HF_TOKEN", 4, "sky.yaml")
    assert str(error) == (
        "sky.yaml:4: envs.HF_TOKEN: has no value: pass --env HF_TOKEN=… or set HF_TOKEN in the "
        "environment\nsky.yaml:5: envs.WANDB_API_KEY: has no value: pass --env WANDB_API_KEY=… "
        "or set WANDB_API_KEY in the environment"
    )
    assert SECRET not in str(error)


def test_errors_in_the_file_come_before_a_missing_env() -> None:
    with pytest.raises(SpecError, match="num_nodes"):
        _parse("num_nodes: zero\nenvs: {HF_TOKEN: }\n", require_envs=True)


def test_a_bad_override_name_is_an_error_naming_envs_without_the_value() -> None:
    with pytest.raises(SpecError, match="envs") as caught:
        _parse("run: echo\n", envs={"1BAD": SECRET})
    assert "'1BAD' is not a valid environment variable name" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_load_task_and_task_from_dict_take_the_same_keywords(tmp_path: Any) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(TOKENS)
    task = load_task(path, envs={"HF_TOKEN": "a", "WANDB_API_KEY": "b"}, require_envs=True)
    assert task.envs["HF_TOKEN"] == "a"
    data = {"run": "echo", "envs": {"HF_TOKEN": None}}
    task, warnings = task_from_dict_with_warnings(data, environ={"HF_TOKEN": "c"})
    assert task.envs == {"HF_TOKEN": "c"} and [w.split(":")[0] for w in warnings] == [
        "envs.HF_TOKEN"
    ]
    assert data == {"run": "echo", "envs": {"HF_TOKEN": None}}  # the input is not changed
    with pytest.raises(SpecError, match=r"^envs\.HF_TOKEN: has no value"):
        task_from_dict_with_warnings(data, require_envs=True)


# --- image_id ------------------------------------------------------------------------------------


def test_an_ami_becomes_the_aws_ami_of_the_task_and_limits_it_to_aws() -> None:
    task, warnings = _parse("resources:\n  accelerators: A100:8\n  image_id: ami-0123abcd\n")
    assert task.resources.provider_config == {"aws": {"ami": "ami-0123abcd"}}
    assert task.resources.providers == ["aws"]
    assert warnings == ["sky.yaml: read as a SkyPilot task (SkyPilot fields: resources.image_id)"]
    # SkyPilot semantics apply: a name without a count is one GPU
    assert task.resources.accelerators is not None
    assert task.resources.accelerators.options == (("A100", 8),)


def test_a_per_region_mapping_limits_the_regions_too() -> None:
    task, _ = _parse(
        """\
        resources:
          cloud: aws
          image_id:
            us-west-2: ami-0bbb
            us-east-1: ami-0aaa
          provider_config: {aws: {ssh_user: ubuntu}}
        """
    )
    assert task.resources.provider_config == {
        "aws": {"ssh_user": "ubuntu", "ami": {"us-west-2": "ami-0bbb", "us-east-1": "ami-0aaa"}}
    }
    assert task.resources.regions == ["us-east-1", "us-west-2"]
    assert task.resources.providers == ["aws"]


def test_a_per_region_mapping_of_images_gpulease_cannot_use_still_limits_the_regions() -> None:
    task, messages = _parse(
        """\
        resources:
          infra: gcp
          image_id:
            us-central1: projects/my-project/global/images/a
            europe-west4: projects/my-project/global/images/b
        """
    )
    assert task.resources.regions == ["europe-west4", "us-central1"]
    assert task.resources.providers == ["gcp"] and not task.resources.provider_config
    assert any("GCP images" in message for message in messages)


def test_several_providers_are_narrowed_to_aws_with_a_warning() -> None:
    task, warnings = _parse("resources:\n  providers: [aws, sim]\n  image_id: ami-1\n")
    assert task.resources.providers == ["aws"]
    assert any(
        "sky.yaml:3: resources.image_id: an AMI exists only on aws: the task runs on aws only "
        "(not sim)" in w
        for w in warnings
    )


@pytest.mark.parametrize(
    ("resources", "line", "words"),
    [
        ("cloud: gcp\n  image_id: ami-1", 3, "an AMI exists only on aws, but the task allows "
         "only gcp (resources.providers)"),
        ("exclude_providers: [aws]\n  image_id: ami-1", 3, "resources.exclude_providers"),
        ("region: eu-west-1\n  image_id: {us-east-1: ami-1}", 3, "has no AMI for eu-west-1"),
        ("image_id: ami-1\n  provider_config: {aws: {ami: ami-2}}", 2,
         "conflicts with resources.provider_config.aws.ami"),
        ("image_id: [ami-1]", 2, "expected an AMI id (ami-…) or a mapping region: AMI id"),
    ],
)  # fmt: skip
def test_an_ami_the_task_cannot_use_is_an_error_naming_image_id(
    resources: str, line: int, words: str
) -> None:
    with pytest.raises(SpecError) as caught:
        _parse(f"resources:\n  {resources}\n")
    assert caught.value.line == line
    assert caught.value.field is not None and caught.value.field.startswith("resources.image_id")
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("image", "form"),
    [
        ("projects/deeplearning-platform-release/global/images/family/common-cu121",
         "GCP images (projects/…)"),
        ("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:latest", "Azure image URNs"),
        ("skypilot:gpu-ubuntu-2204", "SkyPilot image tags (skypilot:…)"),
        ("my-image", "only AWS AMI ids (ami-…) are honoured"),
    ],
)  # fmt: skip
def test_other_image_forms_stay_a_warning_naming_the_form(image: str, form: str) -> None:
    task, warnings = _parse(f"resources:\n  accelerators: T4\n  image_id: {image!r}\n")
    assert task.resources.provider_config == {} and task.resources.providers is None
    assert any("sky.yaml:3: resources.image_id: ignored" in w and form in w for w in warnings)


def test_a_docker_image_is_the_task_image_not_a_warning() -> None:
    task, warnings = _parse(
        "resources:\n  cloud: aws\n  image_id: docker:nvcr.io/nvidia/cuda:12.4\n"
    )
    assert task.resources.image_id == "docker:nvcr.io/nvidia/cuda:12.4"
    assert task.resources.provider_config == {} and task.resources.providers == ["aws"]
    assert not any("image_id" in w for w in warnings)


def test_a_docker_image_per_region_stays_a_warning() -> None:
    task, warnings = _parse("resources:\n  image_id: {us-east-1: 'docker:ubuntu'}\n")
    assert task.resources.image_id is None and task.resources.regions == ["us-east-1"]
    assert any("a docker image per region is not supported" in w for w in warnings)


def test_image_id_in_any_of_entries_is_lifted_like_other_common_fields() -> None:
    task, _ = _parse(
        """\
        resources:
          any_of:
            - {accelerators: A10G, image_id: ami-1}
            - {accelerators: L4, image_id: ami-1}
        """
    )
    assert task.resources.provider_config == {"aws": {"ami": "ami-1"}}
    assert task.resources.providers == ["aws"]


# --- disk_tier and network_tier -------------------------------------------------------------------


def test_disk_tier_and_network_tier_are_resources_fields_in_either_format() -> None:
    sky, warnings = _parse("resources:\n  cloud: aws\n  disk_tier: HIGH\n  network_tier: best\n")
    assert (sky.resources.disk_tier, sky.resources.network_tier) == ("high", "best")
    assert not any("disk_tier" in w or "network_tier" in w for w in warnings)
    native = parse_task("resources:\n  disk: 500\n  disk_tier: ultra\n")
    assert native.resources.disk_tier == "ultra" and native.resources.network_tier is None
    assert parse_task(dump_task(native)) == native
    assert "disk_tier: ultra" in dump_task(native)


@pytest.mark.parametrize(
    ("field", "value", "choices"),
    [
        ("disk_tier", "fast", "low, medium, high, ultra, best"),
        ("network_tier", "ultra", "standard, best"),
    ],
)
def test_a_bad_tier_names_the_field_and_the_choices(field: str, value: str, choices: str) -> None:
    with pytest.raises(SpecError) as caught:
        _parse(f"resources:\n  {field}: {value}\n")
    assert (caught.value.field, caught.value.line) == (f"resources.{field}", 2)
    assert choices in str(caught.value)


def test_the_schema_describes_the_tiers() -> None:
    properties = task_json_schema()["$defs"]["Resources"]["properties"]
    assert "ultra" in str(properties["disk_tier"]) and properties["disk_tier"]["description"]
    assert "standard" in str(properties["network_tier"])


def test_a_docker_image_in_any_of_entries_is_lifted_as_the_task_image() -> None:
    task, warnings = _parse(
        "resources:\n  any_of:\n    - {accelerators: A10G, image_id: docker:ubuntu}\n"
        "    - {accelerators: L4, image_id: docker:ubuntu}\n"
    )
    assert task.resources.image_id == "docker:ubuntu"
    assert task.resources.provider_config == {}
    assert not any("image_id" in w for w in warnings)
