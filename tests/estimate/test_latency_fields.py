"""The workload's latency targets as a user writes them: ``latency_p95: 2s``, ``ttft_p95:
800ms``, ``tpot_p95: 0.05`` (seconds), parsed, dumped and rejected with the field named."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import UserInputError
from gpulease.spec import task_from_dict

FIELDS = {"latency_p95": "latency_p95_s", "ttft_p95": "ttft_p95_s", "tpot_p95": "tpot_p95_s"}
UNITS = {"ms": 0.001, "s": 1.0, " s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "": 1.0}


def _task(**workload: Any) -> Any:
    fields = {"kind": "inference", "model": {"params": "8B"}, **workload}
    return task_from_dict({"name": "serve", "workload": fields})


@given(
    st.sampled_from(sorted(FIELDS)),
    st.decimals(min_value="0.001", max_value="100000", places=3),
    st.sampled_from(sorted(UNITS)),
)
def test_latency_text_parses_to_seconds(field: str, number: Any, unit: str) -> None:
    if number == 0:
        return
    workload = _task(**{field: f"{number}{unit}"}).workload
    assert getattr(workload, FIELDS[field]) == pytest.approx(float(number) * UNITS[unit])


@given(st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_latency_dumps_as_seconds_and_reads_back(seconds: float) -> None:
    workload = _task(latency_p95=seconds, ttft_p95=seconds / 2).workload
    dumped = workload.model_dump(mode="json", by_alias=True)
    assert dumped["latency_p95"] == seconds and dumped["ttft_p95"] == seconds / 2
    again = _task(**{k: v for k, v in dumped.items() if k not in {"kind", "model"}}).workload
    assert again == workload


@pytest.mark.parametrize("value", ["fast", "-1s", "0", "0ms", "inf", "nan", True, [], "2 parsecs"])
def test_bad_latency_names_the_field(value: object) -> None:
    with pytest.raises(UserInputError, match=r"workload\.tpot_p95"):
        _task(tpot_p95=value)


def test_latency_targets_need_an_inference_workload() -> None:
    with pytest.raises(UserInputError, match="latency_p95, ttft_p95: latency targets need kind"):
        task_from_dict(
            {
                "name": "train",
                "workload": {
                    "model": {"params": "1B"},
                    "tokens": "1B",
                    "latency_p95": "2s",
                    "ttft_p95": "1s",
                },
            }
        )


def test_unset_targets_are_none() -> None:
    workload = _task().workload
    assert (workload.latency_p95_s, workload.ttft_p95_s, workload.tpot_p95_s) == (None,) * 3
