"""Bad task files: every error is a SpecError that names the file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpulease.errors import SpecError, UserInputError
from gpulease.spec import load_task, parse_task, task_from_dict


def _error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_task(textwrap.dedent(text), "task.yaml")
    return info.value


@pytest.mark.parametrize(
    ("text", "field", "line", "message"),
    [
        (
            "name: x\nresources:\n  use_spot: true\n  accelerators: A100:x\n",
            "resources.accelerators",
            4,
            "unknown accelerator count 'x'",
        ),
        ("resources:\n  accelerators: A1000:8\n", "resources.accelerators", 2, "did you mean A100"),
        ("resources:\n  accelerators: [A100:0]\n", "resources.accelerators", 2, "positive"),
        (
            "resources:\n  accelerator: A100\n",
            "resources.accelerator",
            2,
            "did you mean 'accelerators'",
        ),
        ("nmae: x\n", "nmae", 1, "unknown field 'nmae'; did you mean 'name'"),
        ("name: x\ndeadlin: 3h\n", "deadlin", 2, "did you mean 'deadline'"),
        ("deadline: soon\n", "deadline", 1, "expected a duration"),
        ("deadline: 0h\n", "deadline", 1, "greater than 0"),
        ("budget: -5\n", "budget", 1, "negative"),
        ("budget: lots\n", "budget", 1, "expected an amount"),
        ("num_nodes: 0\n", "num_nodes", 1, "greater than 0"),
        ("num_nodes: two\n", "num_nodes", 1, "whole number"),
        ("num_nodes: true\n", "num_nodes", 1, "whole number"),
        ("num_nodes: 1.5\n", "num_nodes", 1, "whole number"),
        ("resources:\n  cpus: lots\n", "resources.cpus", 2, "expected an amount"),
        ("resources:\n  memory: 0\n", "resources.memory", 2, "greater than 0"),
        ("resources:\n  use_spot: maybe\n", "resources.use_spot", 2, "true, false or auto"),
        ("resources:\n  providers: []\n", "resources.providers", 2, "must not be empty"),
        ("resources:\n  commitment: 2y\n", "resources.commitment", 2, "none, 1y, 3y"),
        ("resources: [a100]\n", "resources", 1, "expected a mapping"),
        (
            "resources:\n  max_price_per_hour: 0\n",
            "resources.max_price_per_hour",
            2,
            "greater than 0",
        ),
        (
            "resources:\n  provider_config: {aws: {when: 2024-01-01}}\n",
            "resources.provider_config",
            2,
            "aws.when",
        ),
        (
            "workload:\n  model: {params: 7B}\n  tokens: 1B\n  kind: trian\n",
            "workload.kind",
            4,
            "did you mean 'train'",
        ),
        (
            "workload:\n  model:\n    layers: 3\n  tokens: 1B\n",
            "workload.model.params",
            2,
            "required",
        ),
        ("workload:\n  tokens: 1B\n", "workload.model", 1, "required"),
        ("workload:\n  model: {params: 7B}\n", "workload", 1, "needs tokens"),
        ("workload:\n  model: {params: zero}\n  tokens: 1\n", "workload.model.params", 2, "7B"),
        ("workload:\n  model: {params: 0}\n  tokens: 1\n", "workload.model.params", 2, "greater"),
        (
            "workload:\n  model: {params: 25M, arch: cnn}\n  samples: 1M\n",
            "workload",
            1,
            "flops_per_sample",
        ),
        (
            "workload:\n  model: {params: 7B, heads: 32, kv_heads: 5}\n  tokens: 1B\n",
            "workload.model",
            2,
            "must divide",
        ),
        (
            "workload:\n  model: {params: 7B}\n  tokens: 1B\n  epochs: 0\n",
            "workload.epochs",
            4,
            "greater than 0",
        ),
        (
            "workload:\n  model: {params: 7B}\n  tokens: 1B\n  precision: bf17\n",
            "workload.precision",
            4,
            "did you mean 'bf16'",
        ),
        ("envs:\n  1BAD: x\n", "envs", 1, "not a valid environment variable name"),
        ("envs:\n  OK: [1, 2]\n", "envs.OK", 2, "expected text"),
        ("name: [a]\n", "name", 1, "expected text"),
        ("file_mounts: [a]\n", "file_mounts", 1, "expected a mapping"),
        ("checkpoint:\n  sync_interval: often\n", "checkpoint.sync_interval", 2, "duration"),
        ("job_recovery:\n  strategy: sideways\n", "job_recovery.strategy", 2, "next_region"),
        (
            "job_recovery:\n  max_restarts_on_errors: -1\n",
            "job_recovery.max_restarts_on_errors",
            2,
            "at least 0",
        ),
        ("job_recovery:\n  zone_cooldown: -5m\n", "job_recovery.zone_cooldown", 2, "duration"),
        (
            "resources:\n  providers: aws\n  exclude_providers: [AWS]\n",
            "resources",
            1,
            "both allowed and excluded",
        ),
    ],
)
def test_error_names_field_and_line(text: str, field: str, line: int, message: str) -> None:
    error = _error(text)
    assert error.field == field
    assert error.line == line
    assert error.source == "task.yaml"
    assert message in error.message
    assert str(error).startswith(f"task.yaml:{line}: {field}: ")


def test_spec_error_is_a_user_input_error() -> None:
    assert issubclass(SpecError, UserInputError)


def test_several_errors_are_reported_together_in_line_order() -> None:
    error = _error("budget: x\nnum_nodes: 0\nresources:\n  cpus: -1\n")
    assert (error.field, error.line) == ("budget", 1)
    lines = str(error).splitlines()
    assert lines[0].startswith("task.yaml:1: budget: ")
    assert lines[1].startswith("task.yaml:2: num_nodes: ")
    assert lines[2].startswith("task.yaml:4: resources.cpus: ")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("name: x\n  bad: indent\n", 2, "invalid YAML"),
        ("resources: [a, b\n", 2, "invalid YAML"),
        ("a: 1\na: 2\n", 2, "duplicate key 'a' (first given on line 1)"),
        ("resources:\n  cpus: 1\n  cpus: 2\n", 3, "duplicate key 'cpus'"),
        ("name: x\n---\nname: y\n", 2, "pipelines are not supported yet"),
        ("name: !custom x\n", 1, "tag"),
        ("? [a, b]\n: c\n", 1, "mapping keys must be plain names"),
        ("deadline: 2024-13-45\n", 1, "invalid value"),
        ("name: \x07\n", 1, "not allowed"),
        ("- a\n- b\n", 1, "a task is a mapping"),
        ("just text\n", 1, "a task is a mapping"),
        ("a: &a [*a]\n", 1, "too deeply"),
    ],
)
def test_yaml_level_errors_give_the_line(text: str, line: int, message: str) -> None:
    error = _error(text)
    assert error.line == line
    assert message in str(error)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_an_empty_file_is_an_error(text: str) -> None:
    assert "empty" in _error(text).message


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    assert "too deeply" in str(_error("name: " + "[" * 5000 + "]" * 5000))


def test_alias_bombs_are_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)
    ]
    text = "resources:\n  provider_config:\n" + textwrap.indent("\n".join(lines), "    ")
    assert "too deeply" in str(_error(text))


def test_missing_file_is_a_spec_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError, match="cannot read the task file") as info:
        load_task(path)
    assert info.value.source == str(path)


def test_a_directory_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        load_task(tmp_path)


def test_non_utf8_file_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(SpecError, match="UTF-8"):
        load_task(path)


def test_file_errors_carry_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "task.yaml"
    path.write_text("resources:\n  accelerators: A100:x\n")
    with pytest.raises(SpecError) as info:
        load_task(path)
    assert str(info.value).startswith(f"{path}:2: resources.accelerators: ")


def test_task_from_dict_names_fields_without_lines() -> None:
    with pytest.raises(SpecError) as info:
        task_from_dict({"resources": {"cpus": "lots"}})
    assert info.value.field == "resources.cpus"
    assert info.value.line is None


@pytest.mark.parametrize("data", [None, [], "text", 5])
def test_task_from_dict_refuses_non_mappings(data: object) -> None:
    with pytest.raises(SpecError):
        task_from_dict(data)  # type: ignore[arg-type]


def test_parse_task_refuses_bytes() -> None:
    with pytest.raises(SpecError, match="expected YAML text"):
        parse_task(b"name: x")  # type: ignore[arg-type]


def test_huge_numbers_are_spec_errors() -> None:
    huge = "9" * 400
    for text in (
        f"budget: {huge}",
        f"num_nodes: {huge}",
        f"resources:\n  memory: {huge}",
        f"workload:\n  model: {{params: {huge}}}\n  tokens: 1",
        f"workload:\n  model: {{params: 1}}\n  tokens: 1\n  epochs: {huge}",
    ):
        assert "too large" in str(_error(text)) or "at most" in str(_error(text))
