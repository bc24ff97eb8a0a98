"""``resources.autostop``: SkyPilot's forms (true, false, minutes, 10m, {idle_minutes, down}),
gpulease's load rule (gpu_utilisation_below, either spelling), the errors naming the field, the
JSON Schema accepting what the parser accepts, and the round trip through dump_task."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError, UserInputError
from gpulease.spec import Task, dump_task, parse_task, parse_task_with_warnings
from gpulease.spec import task_json_schema as schema_of
from gpulease.spec.autostop import AutostopSpec

from .strategies import examples

jsonschema = pytest.importorskip("jsonschema")


def _autostop(value: Any) -> AutostopSpec | None:
    text = yaml.safe_dump({"resources": {"autostop": value}, "run": "x"})
    return parse_task(text).resources.autostop


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, AutostopSpec(idle_minutes=5)),
        (False, None),
        (-1, None),
        (0, AutostopSpec(idle_minutes=0)),
        (10, AutostopSpec(idle_minutes=10)),
        ("10", AutostopSpec(idle_minutes=10)),
        ("10m", AutostopSpec(idle_minutes=10)),
        ("1h", AutostopSpec(idle_minutes=60)),
        ({"idle_minutes": 30, "down": True}, AutostopSpec(idle_minutes=30, down=True)),
        ({"down": True}, AutostopSpec(idle_minutes=5, down=True)),
        ({"gpu_utilisation_below": 5}, AutostopSpec(gpu_utilisation_below=5.0)),
        ({"gpu_utilization_below": 7.5}, AutostopSpec(gpu_utilisation_below=7.5)),
    ],
)
def test_skypilot_forms_and_the_load_rule(value: Any, expected: AutostopSpec | None) -> None:
    assert _autostop(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("30s", "resources.autostop: '30s' is not a whole number of minutes"),
        (-3, "resources.autostop: must be at least 0"),
        (2.5, "resources.autostop: expected true, false, idle minutes"),
        ([10], "resources.autostop: expected true, false, idle minutes"),
        ({"idle": 3}, "resources.autostop.idle: unknown field 'idle'"),
        ({"gpu_utilisation_below": 0}, "resources.autostop.gpu_utilisation_below: must be"),
        ({"gpu_utilisation_below": 101}, "resources.autostop.gpu_utilisation_below: must be"),
        ({"gpu_utilization_below": 101}, "resources.autostop.gpu_utilization_below: must be"),
        (
            {"gpu_utilisation_below": 5, "gpu_utilization_below": 5},
            "resources.autostop.gpu_utilization_below: conflicts with "
            "resources.autostop.gpu_utilisation_below",
        ),
        ({"down": "maybe"}, "resources.autostop.down"),
    ],
)
def test_bad_values_name_the_field(value: Any, message: str) -> None:
    with pytest.raises(SpecError) as raised:
        _autostop(value)
    assert isinstance(raised.value, UserInputError)  # the CLI says it in one line, exit 2
    assert message in str(raised.value)


def test_skypilot_only_keys_are_dropped_with_a_warning_on_their_line() -> None:
    text = textwrap.dedent(
        """\
        resources:
          autostop:
            idle_minutes: 10
            wait_for: none
            hook: git push
        run: x
        """
    )
    task, warnings = parse_task_with_warnings(text, "sky.yaml")
    assert task.resources.autostop == AutostopSpec(idle_minutes=10)
    assert any(w.startswith("sky.yaml:4: resources.autostop.wait_for: ignored") for w in warnings)
    assert any(w.startswith("sky.yaml:5: resources.autostop.hook: ignored") for w in warnings)


def test_the_error_gives_the_line() -> None:
    with pytest.raises(SpecError, match=r"^t.yaml:3: resources.autostop.idle_minutes"):
        parse_task("run: x\nresources:\n  autostop: {idle_minutes: soon}\n", "t.yaml")


_forms = st.one_of(
    st.booleans(),
    st.integers(min_value=0, max_value=10**6),
    st.integers(min_value=0, max_value=10**4).map(lambda n: f"{n}m"),
    st.integers(min_value=0, max_value=10**3).map(lambda n: f"{n}h"),
    st.fixed_dictionaries(
        {},
        optional={
            "idle_minutes": st.integers(min_value=0, max_value=10**6),
            "down": st.booleans(),
            "gpu_utilisation_below": st.floats(min_value=0.01, max_value=100.0),
        },
    ),
)


@examples(200)
@given(_forms)
def test_every_accepted_form_round_trips_and_the_schema_accepts_it(value: Any) -> None:
    spec = _autostop(value)
    if value is False:
        assert spec is None
    else:
        assert spec is not None and spec.idle_minutes >= 0
    task = Task.model_validate({"run": "x", "resources": {"autostop": value}})
    assert parse_task(dump_task(task)) == task
    document = {"run": "x", "resources": {"autostop": value}}
    jsonschema.Draft202012Validator(schema_of()).validate(document)


_junk = st.one_of(
    st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
    st.integers(max_value=-2),
    st.text(alphabet="abcxyz!?", min_size=1, max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["idle", "stop", "gpu"]), st.integers(), min_size=1),
)


@examples(200)
@given(_junk)
def test_junk_is_refused_with_the_field_named(value: Any) -> None:
    with pytest.raises(SpecError) as raised:
        _autostop(value)
    assert "resources.autostop" in str(raised.value)
