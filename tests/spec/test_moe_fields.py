"""The mixture-of-experts fields of a workload: valid ones validate and round-trip, invalid ones
fail naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError
from gpulease.spec import ModelSpec, task_from_dict

from .strategies import examples, moe_models, whole

_SETTINGS = examples(100)


def _task(model: dict[str, Any], **workload: Any) -> object:
    return task_from_dict({"workload": {"model": model, "tokens": "1T", **workload}})


@_SETTINGS
@given(moe_models())
def test_valid_moe_models_round_trip(model: ModelSpec) -> None:
    written = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert ModelSpec.model_validate(written) == model
    assert model.active_params is not None and model.active_params <= model.params


@_SETTINGS
@given(st.floats(min_value=1.0, max_value=1e13), st.floats(min_value=1.0001, max_value=100.0))
def test_active_params_above_params_is_refused(params: float, ratio: float) -> None:
    with pytest.raises(SpecError, match=r"active_params \(.*\) must not exceed params") as info:
        _task({"params": params, "active_params": params * ratio})
    assert info.value.field == "workload.model"


@_SETTINGS
@given(whole(512), st.integers(min_value=1, max_value=512))
def test_experts_per_token_above_experts_is_refused(experts: int, extra: int) -> None:
    model = {"params": "671B", "active_params": "37B", "experts": experts,
             "experts_per_token": experts + extra}  # fmt: skip
    with pytest.raises(SpecError, match=r"experts_per_token \(\d+\) must not exceed experts"):
        _task(model)


@pytest.mark.parametrize(
    ("model", "workload", "message"),
    [
        ({"params": "671B", "experts": 256}, {}, "needs active_params"),
        ({"params": "671B", "experts_per_token": 8}, {}, "needs active_params"),
        ({"params": "7B"}, {"expert_parallel": 8}, "expert_parallel needs a mixture-of-experts"),
        ({"params": "671B", "active_params": "37B", "experts": 256}, {"expert_parallel": 512},
         r"expert_parallel \(512\) must not exceed model.experts \(256\)"),
        ({"params": "671B", "active_params": "-1"}, {}, "active_params"),
        ({"params": "671B", "active_params": "37B", "experts": 0}, {}, "experts"),
    ],
)  # fmt: skip
def test_inconsistent_moe_fields_name_the_field(
    model: dict[str, Any], workload: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message):
        _task(model, **workload)


def test_the_schema_documents_the_moe_fields() -> None:
    from gpulease.spec import task_json_schema

    definitions = task_json_schema()["$defs"]
    model = definitions["ModelSpec"]["properties"]
    assert {"active_params", "experts", "experts_per_token"} <= set(model)
    assert "active" in model["active_params"]["description"]
    assert "expert_parallel" in definitions["Workload"]["properties"]
