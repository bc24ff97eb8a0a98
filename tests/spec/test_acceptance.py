"""``resources.acceptance``: true (the defaults), false, the mapping's fields and their
defaults, the errors naming the field, what the server hands the controller, the JSON Schema
accepting what the parser accepts, and the round trip through dump_task."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError
from gpulease.server.tasks import run_spec
from gpulease.spec import Task, dump_task, parse_task
from gpulease.spec import task_json_schema as schema_of
from gpulease.spec.acceptance import ACCEPTANCE_FAMILIES, AcceptanceSpec

from .strategies import examples

jsonschema = pytest.importorskip("jsonschema")


def _acceptance(value: Any) -> AcceptanceSpec | None:
    text = yaml.safe_dump({"resources": {"acceptance": value}, "run": "x"})
    return parse_task(text).resources.acceptance


def test_true_is_the_defaults_false_is_none_and_the_fields_read() -> None:
    assert _acceptance(True) == AcceptanceSpec(min_ratio=0.5, minimums={}, max_replacements=2,
                                               checks=None, degraded_for=1.0)  # fmt: skip
    assert _acceptance(False) is None and _acceptance(None) is None
    spec = _acceptance({"min_ratio": 0.7, "minimums": {"disk.seq_read": 1000, "h2d.pinned": 20},
                        "max_replacements": 0, "checks": ["matmul", "disk", "matmul"],
                        "degraded_for": "30m"})  # fmt: skip
    assert spec == AcceptanceSpec(min_ratio=0.7, minimums={"disk.seq_read": 1000.0,
                                  "h2d.pinned": 20.0}, max_replacements=0,
                                  checks=("matmul", "disk"), degraded_for=0.5)  # fmt: skip


def test_the_server_hands_the_controller_plain_json_in_seconds() -> None:
    task = parse_task("run: x\nresources:\n  acceptance: {minimums: {matmul.bf16: 400}, "
                      "degraded_for: 2h, checks: [matmul]}\n")  # fmt: skip
    assert run_spec(task).acceptance == {"min_ratio": 0.5, "minimums": {"matmul.bf16": 400.0},
                                         "max_replacements": 2, "checks": ["matmul"],
                                         "degraded_for_s": 7200.0}  # fmt: skip
    assert run_spec(parse_task("run: x\n")).acceptance is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (3, "resources.acceptance: expected true, false or {min_ratio"),
        ({"min_ratio": 0}, "resources.acceptance.min_ratio: must be greater than 0"),
        ({"min_ratio": 1.5}, "resources.acceptance.min_ratio: must be at most 1"),
        ({"max_replacements": -1}, "resources.acceptance.max_replacements: must be at least 0"),
        ({"checks": ["matmul", "gpus"]}, "resources.acceptance.checks: unknown check family "
                                         "'gpus'; choose among gpu, matmul"),
        ({"checks": []}, "resources.acceptance.checks: name at least one check family"),
        ({"minimums": {"disk": 5}}, "resources.acceptance.minimums: 'disk' is not a check"),
        ({"minimums": {"train.resnet50": 5}}, "'train.resnet50' is not a check of the quick"),
        ({"minimums": {"disk.seq_read": -5}}, "resources.acceptance.minimums.disk.seq_read"),
        ({"min_ratios": 0.5}, "resources.acceptance.min_ratios"),
        ({"degraded_for": "0h"}, "resources.acceptance.degraded_for"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_field(value: Any, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        _acceptance(value)
    assert message in str(raised.value)


_CHECK_NAMES = st.sampled_from(["disk.seq_read", "disk.rand_read_iops", "matmul.bf16",
                                "net.latency", "allreduce.cluster", "d2h.pinned"])  # fmt: skip
_forms = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {},
        optional={
            "min_ratio": st.floats(min_value=0.01, max_value=1.0),
            "minimums": st.dictionaries(_CHECK_NAMES, st.floats(min_value=0.1, max_value=1e6)),
            "max_replacements": st.integers(min_value=0, max_value=50),
            "checks": st.lists(st.sampled_from(ACCEPTANCE_FAMILIES), min_size=1, max_size=4),
            "degraded_for": st.integers(min_value=1, max_value=48).map(lambda h: f"{h}h"),
        },
    ),
)


@examples(150)
@given(_forms)
def test_every_accepted_form_round_trips_and_the_schema_accepts_it(value: Any) -> None:
    spec = _acceptance(value)
    assert (spec is None) == (value is False)
    task = Task.model_validate({"run": "x", "resources": {"acceptance": value}})
    assert parse_task(dump_task(task)) == task
    document = {"run": "x", "resources": {"acceptance": value}}
    jsonschema.Draft202012Validator(schema_of()).validate(document)


_junk = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["ratio", "minimum", "replace"]), st.integers(), min_size=1),
    st.fixed_dictionaries({"checks": st.lists(st.text(max_size=5), min_size=1, max_size=2)}),
)


@examples(150)
@given(_junk)
def test_junk_is_refused_with_the_field_named(value: Any) -> None:
    if isinstance(value, dict) and set(value.get("checks", ["x"])) <= set(ACCEPTANCE_FAMILIES):
        return  # a valid list of families drawn by chance
    with pytest.raises(SpecError) as raised:
        _acceptance(value)
    assert "resources.acceptance" in str(raised.value)
