"""Writing tasks back as YAML: user-facing names, and parse_task(dump_task(t)) == t."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from pydantic import ValidationError

from gpulease.spec import Task, dump_task, load_task_with_warnings, parse_task, task_from_dict

from .conftest import NATIVE_EXAMPLES, SKYPILOT_EXAMPLES
from .strategies import examples, task_fields


@pytest.mark.parametrize("path", NATIVE_EXAMPLES + SKYPILOT_EXAMPLES, ids=lambda p: p.stem)
def test_examples_round_trip(path: Path) -> None:
    task, _ = load_task_with_warnings(path)
    assert parse_task(dump_task(task)) == task


def test_dump_uses_the_names_a_user_writes() -> None:
    text = """\
resources:
  accelerators: [H100:8, A100-80GB:8]
  memory: 64+
  max_price_per_hour: $12.5
workload:
  model: {params: 7B}
  tokens: 1.5T
deadline: 36h
budget: $500
checkpoint: {sync_interval: 5m}
job_recovery: {zone_cooldown: 45m}
run: |
  echo one
  echo two
"""
    dumped = dump_task(parse_task(text))
    assert yaml.safe_load(dumped) == {
        "resources": {
            "accelerators": ["H100:8", "A100-80GB:8"],
            "memory": "64+",
            "max_price_per_hour": "$12.5",
        },
        "workload": {"model": {"params": "7B"}, "tokens": "1.5T"},
        "deadline": "36h",
        "budget": "$500",
        "checkpoint": {"sync_interval": "5m"},
        "job_recovery": {"zone_cooldown": "45m"},
        "run": "echo one\necho two\n",
    }
    assert "run: |" in dumped
    for internal in ("deadline_hours", "budget_usd", "sync_interval_hours", "choices"):
        assert internal not in dumped


def test_dump_leaves_defaults_out() -> None:
    assert dump_task(Task()) == "{}\n"
    assert parse_task(dump_task(Task())) == Task()


@pytest.mark.parametrize(
    ("accelerators", "written"),
    [
        ("A100:8", "A100:8"),
        ("a100", "A100:1"),
        ("a100:auto", "A100:auto"),
        ({"A100": 8, "H100": None}, {"A100": 8, "H100": 1}),
        ({"A100:4": None, "A100:8": None}, {"A100:4": None, "A100:8": None}),
        (["h100:8"], ["H100:8"]),
    ],
)
def test_dump_keeps_the_accelerator_form(accelerators: object, written: object) -> None:
    task = task_from_dict({"resources": {"accelerators": accelerators}})
    assert yaml.safe_load(dump_task(task))["resources"]["accelerators"] == written


@examples(150)
@given(task_fields)
def test_any_task_survives_dump_and_parse(fields: dict[str, Any]) -> None:
    try:
        task = Task(**fields)
    except ValidationError:
        assume(False)
        raise
    assert parse_task(dump_task(task)) == task
    assert Task.model_validate(task.model_dump()) == task
    assert Task.model_validate_json(task.model_dump_json(by_alias=True)) == task
