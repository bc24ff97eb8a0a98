"""Properties of the ``service:`` and ``pool:`` sections: any valid service round-trips through
YAML, seconds and ports round-trip, bad values raise the SpecError naming the field, and
SkyServe-shaped tasks give a task or a SpecError, never anything else."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError
from gpulease.spec import Task, dump_task, parse_task, parse_task_with_warnings, task_from_dict
from gpulease.spec.serve_fields import format_ports, format_seconds, parse_ports, parse_seconds
from gpulease.spec.service import (
    AutoscaleSpec,
    ReadinessProbe,
    ReplicaRange,
    ScaleDown,
    ScaleUp,
    ServiceSpec,
    ServiceSpot,
)

from .strategies import examples, yaml_like, yaml_scalars

# --- properties -------------------------------------------------------------------------------

_SECONDS = st.one_of(
    st.integers(min_value=0, max_value=10**9).map(float),
    st.floats(min_value=0, max_value=1e12, allow_nan=False),
)
_THRESHOLD = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False)


@st.composite
def _replica_ranges(draw: st.DrawFn) -> ReplicaRange:
    low = draw(st.integers(min_value=0, max_value=1000))
    high = draw(st.none() | st.integers(min_value=max(low, 1), max_value=1000))
    return ReplicaRange(min=low, max=high)


@st.composite
def _autoscales(draw: st.DrawFn) -> AutoscaleSpec:
    below, above = sorted(draw(st.lists(_THRESHOLD, min_size=2, max_size=2, unique=True)))
    steps = st.integers(min_value=1, max_value=1000)
    return AutoscaleSpec(
        metric=draw(st.sampled_from(["load", "qps", "latency_p95", "gpu_utilisation"])),
        target_per_replica=draw(_THRESHOLD),
        up=ScaleUp(threshold=above, step=draw(steps), for_s=draw(_SECONDS)),
        down=ScaleDown(threshold=below, step=draw(steps), for_s=draw(_SECONDS)),
        cooldown_s=draw(_SECONDS),
    )


_services = st.builds(
    ServiceSpec,
    port=st.integers(min_value=1, max_value=65535),
    replicas=_replica_ranges(),
    autoscale=st.none() | _autoscales(),
    spot=st.builds(
        ServiceSpot,
        on_demand_base=st.integers(min_value=0, max_value=1000),
        spot_share=st.floats(min_value=0, max_value=1),
    ),
    readiness_probe=st.builds(
        ReadinessProbe,
        path=st.from_regex(r"/[a-z0-9/_-]{0,12}", fullmatch=True),
        initial_delay_s=_SECONDS,
        timeout_s=st.floats(min_value=1e-3, max_value=1e6),
    ),
)


@examples(60)
@given(_services, st.lists(st.integers(min_value=1, max_value=65535), max_size=4), st.booleans())
def test_any_valid_service_round_trips_through_yaml(
    service: ServiceSpec, ports: list[int], spot: bool
) -> None:
    task = Task(service=service, resources={"ports": ports, "use_spot": spot})  # type: ignore[arg-type]
    assert parse_task(dump_task(task)) == task
    assert Task.model_validate(task.model_dump()) == task


@examples(60)
@given(_replica_ranges(), _autoscales())
def test_ranges_and_rules_round_trip_as_yaml(replicas: ReplicaRange, rule: AutoscaleSpec) -> None:
    for model in (replicas, rule):
        text = yaml.safe_dump(model.model_dump(mode="json", by_alias=True))
        assert type(model).model_validate(yaml.safe_load(text)) == model


@examples(100)
@given(_SECONDS)
def test_seconds_round_trip(seconds: float) -> None:
    assert parse_seconds(format_seconds(seconds)) == seconds


@examples(60)
@given(st.lists(st.integers(min_value=1, max_value=65535), max_size=8))
def test_ports_round_trip(ports: list[int]) -> None:
    assert parse_ports(format_ports(parse_ports(ports))) == list(dict.fromkeys(ports))


_NOT_WHOLE = st.one_of(st.booleans(), st.floats().filter(lambda f: not float(f).is_integer()),
                       st.text(alphabet="abc-x ", max_size=5))  # fmt: skip
_BAD_VALUES: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("service", "port"): st.one_of(_NOT_WHOLE, st.integers(max_value=0), st.integers(65536)),
    ("service", "replicas", "min"): st.one_of(_NOT_WHOLE, st.integers(max_value=-1),
                                              st.integers(min_value=1001)),
    ("service", "autoscale", "up", "above"): st.one_of(st.booleans(), st.floats(max_value=0),
                                                       st.sampled_from(["x", "nan", [], {}])),
    ("service", "autoscale", "down", "remove"): st.one_of(_NOT_WHOLE, st.integers(max_value=0)),
    ("service", "autoscale", "cooldown"): st.one_of(st.booleans(), st.floats(max_value=-1e-9),
                                                    st.sampled_from(["1 fortnight", "-", []])),
    ("service", "spot", "spot_share"): st.one_of(st.booleans(), st.floats(min_value=1.0001),
                                                 st.floats(max_value=-1e-9)),
    ("service", "replica_policy", "max_replicas"): st.one_of(_NOT_WHOLE, st.integers(1001)),
    ("service", "readiness_probe", "timeout_seconds"): st.one_of(
        st.booleans(), st.floats(max_value=0), st.text(alphabet="xyz", min_size=1, max_size=3)),
    ("pool", "idle_timeout"): st.one_of(st.booleans(), st.floats(max_value=-1e-9)),
    ("pool", "workers"): st.one_of(_NOT_WHOLE, st.integers(max_value=0)),
    ("resources", "ports"): st.one_of(st.booleans(), st.integers(max_value=0), st.integers(65536),
                                      st.sampled_from(["x", "9-1", "1-99999", [0], [{}], {}])),
}  # fmt: skip


@examples(150)
@given(
    st.sampled_from(sorted(_BAD_VALUES)).flatmap(lambda p: st.tuples(st.just(p), _BAD_VALUES[p]))
)
def test_bad_values_raise_the_spec_error_naming_the_field(
    case: tuple[tuple[str, ...], Any],
) -> None:
    path, value = case
    data: dict[str, Any] = {}
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(SpecError) as caught:
            task_from_dict(data)
        assert caught.value.field is not None
        assert caught.value.field.startswith(".".join(path)), str(caught.value)
        with pytest.raises(SpecError) as from_yaml:
            parse_task_with_warnings(yaml.safe_dump(data), "t.yaml")
        assert from_yaml.value.field == caught.value.field
        assert from_yaml.value.line is not None


_SERVICE_KEYS = ["port", "ports", "readiness_probe", "replicas", "replica_policy", "autoscale",
                 "spot", "load_balancing_policy", "tls", "pool"]  # fmt: skip
_POLICY_KEYS = ["min_replicas", "max_replicas", "target_qps_per_replica", "upscale_delay_seconds",
                "downscale_delay_seconds", "base_ondemand_fallback_replicas",
                "dynamic_ondemand_fallback", "num_overprovision", "spot_zones"]  # fmt: skip
_PROBE_KEYS = ["path", "initial_delay_seconds", "initial_delay", "timeout_seconds", "timeout",
               "post_data", "headers"]  # fmt: skip
_VALUES = st.one_of(yaml_scalars, st.sampled_from(["/health", "20s", "5m", 8080, 2.5, True, []]))
_skyserve = st.fixed_dictionaries(
    {},
    optional={
        "service": st.dictionaries(
            st.sampled_from(_SERVICE_KEYS),
            st.one_of(
                _VALUES,
                st.dictionaries(st.sampled_from(_POLICY_KEYS), _VALUES, max_size=4),
                st.dictionaries(st.sampled_from(_PROBE_KEYS), _VALUES, max_size=3),
                yaml_like,
            ),
            max_size=4,
        ),
        "pool": st.one_of(
            yaml_like,
            st.dictionaries(
                st.sampled_from(
                    [
                        "workers",
                        "min_workers",
                        "max_workers",
                        "min_nodes",
                        "max_nodes",
                        "idle_timeout",
                        "queue_length_threshold",
                    ]
                ),
                _VALUES,
                max_size=3,
            ),
        ),
        "resources": st.fixed_dictionaries(
            {}, optional={"use_spot": _VALUES, "ports": st.one_of(_VALUES, st.lists(_VALUES))}
        ),
    },
)


@examples(150)
@given(_skyserve)
def test_skyserve_shaped_tasks_give_a_task_or_a_spec_error(data: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in (
            lambda: task_from_dict(data),
            lambda: parse_task_with_warnings(yaml.safe_dump(data), "t.yaml")[0],
        ):
            try:
                task = call()
            except SpecError as error:
                assert error.message and "pydantic" not in error.message
                continue
            assert isinstance(task, Task)
            assert parse_task(dump_task(task)) == task
