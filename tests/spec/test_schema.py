"""The JSON Schema describes the YAML a user writes, and the examples validate against it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from pydantic import ValidationError

from gpulease.spec import Task, dump_task, task_json_schema

from .conftest import NATIVE_EXAMPLES, SKYPILOT_EXAMPLES
from .strategies import examples, task_fields

jsonschema = pytest.importorskip("jsonschema")


@functools.cache
def _validator() -> Any:
    schema = task_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _properties(schema: dict[str, Any], definition: str | None = None) -> dict[str, Any]:
    node = schema["$defs"][definition] if definition else schema
    properties: dict[str, Any] = node["properties"]
    return properties


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    schema = task_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_schema_uses_the_names_a_user_writes() -> None:
    schema = task_json_schema()
    top = _properties(schema)
    assert {"deadline", "budget", "resources", "workload", "num_nodes"} <= set(top)
    assert "deadline_hours" not in top
    assert "budget_usd" not in top
    assert "sync_interval" in _properties(schema, "CheckpointSpec")
    assert "zone_cooldown" in _properties(schema, "JobRecovery")
    resources = _properties(schema, "Resources")
    assert {"provider", "providers", "region", "regions", "accelerators"} <= set(resources)


def test_schema_fields_have_descriptions() -> None:
    schema = task_json_schema()
    for definition in (None, "Resources", "Workload", "ModelSpec"):
        for name, field in _properties(schema, definition).items():
            assert field.get("description"), f"{definition}.{name} has no description"


def test_schema_is_a_fresh_copy_each_time() -> None:
    schema = task_json_schema()
    schema["properties"].clear()
    assert task_json_schema()["properties"]


@pytest.mark.parametrize("path", NATIVE_EXAMPLES, ids=lambda p: p.stem)
def test_native_examples_validate_against_the_schema(path: Path) -> None:
    _validator().validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", SKYPILOT_EXAMPLES, ids=lambda p: p.stem)
def test_skypilot_examples_validate_against_the_schema(path: Path) -> None:
    """An editor validating a SkyPilot file against the schema flags nothing gpulease reads."""
    _validator().validate(yaml.safe_load(path.read_text()))


def test_skypilot_fields_are_marked_as_compatibility() -> None:
    schema = task_json_schema()
    resources = _properties(schema, "Resources")
    for name in ("cloud", "infra", "any_of", "ordered", "disk_size", "labels"):
        assert resources[name]["description"].startswith("SkyPilot compatibility: "), name
    assert _properties(schema)["config"]["description"].startswith("SkyPilot compatibility: ")
    assert "SkyPilot's field" in _properties(schema)["secrets"]["description"]  # gpulease's own


@pytest.mark.parametrize(
    "accelerators",
    [
        "A100:8",
        "H100",
        "H100:auto",
        {"A100": 8, "H100": 8},
        {"A100": "auto"},
        {"A100:8": None},
        {"A100:4": None, "A100:8": None, "A100-80GB:2": None},
        ["H100:8", "A100-80GB:8"],
    ],
)
def test_all_accelerator_forms_validate(accelerators: object) -> None:
    _validator().validate({"resources": {"accelerators": accelerators}})


@pytest.mark.parametrize(
    "document",
    [
        {"deadline": "36h", "budget": "$500", "num_nodes": 2},
        {"resources": {"cpus": "8+", "memory": "32GB+", "disk": 256, "use_spot": "auto"}},
        {"resources": {"provider": "aws", "region": ["us-east-1"]}},
        {"workload": {"model": {"params": "7B"}, "tokens": "1.5T"}},
        {"workload": {"model": {"params": 25.6e6, "arch": "cnn"}, "samples": "1.28M"}},
    ],
)
def test_user_forms_validate(document: dict[str, Any]) -> None:
    _validator().validate(document)


@pytest.mark.parametrize(
    "document",
    [
        {"deadlin": "36h"},
        {"deadline_hours": 36},
        {"num_nodes": 0},
        {"resources": {"accelerators": 8}},
        {"resources": {"accelerators": []}},
        {"resources": {"use_spot": "maybe"}},
        {"workload": {"tokens": "1B"}},
        {"workload": {"model": {"params": "seven"}}},
    ],
)
def test_schema_rejects_what_the_parser_rejects(document: dict[str, Any]) -> None:
    assert list(_validator().iter_errors(document))


@examples(60)
@given(task_fields)
def test_every_dumped_task_validates_against_the_schema(fields: dict[str, Any]) -> None:
    try:
        task = Task(**fields)
    except ValidationError:
        assume(False)
        raise
    _validator().validate(yaml.safe_load(dump_task(task)))
