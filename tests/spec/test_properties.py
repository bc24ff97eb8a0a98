"""Property tests: no input makes the parser raise anything but SpecError."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpulease.errors import SpecError
from gpulease.spec import Task, parse_task_with_warnings, task_from_dict

from .strategies import examples, yaml_like, yaml_scalars

_SETTINGS = examples(200)

_FIELD_PATHS = [
    ("name",), ("num_nodes",), ("deadline",), ("budget",), ("data_policy",), ("workdir",),
    ("file_mounts",), ("setup",), ("run",), ("envs",), ("resources",),
    ("resources", "accelerators"), ("resources", "cpus"), ("resources", "memory"),
    ("resources", "disk"), ("resources", "use_spot"), ("resources", "providers"),
    ("resources", "provider"), ("resources", "regions"), ("resources", "region"),
    ("resources", "exclude_providers"), ("resources", "exclude_regions"),
    ("resources", "instance_type"), ("resources", "max_price_per_hour"),
    ("resources", "commitment"), ("resources", "provider_config"),
    ("resources", "cloud"), ("resources", "infra"), ("resources", "zone"),
    ("resources", "disk_size"), ("resources", "any_of"), ("resources", "ordered"),
    ("resources", "job_recovery"), ("resources", "image_id"), ("resources", "max_hourly_cost"),
    ("resources", "acceptance"), ("resources", "acceptance", "minimums"),
    ("workload",), ("workload", "kind"), ("workload", "model"), ("workload", "model", "params"),
    ("workload", "model", "arch"), ("workload", "model", "heads"), ("workload", "tokens"),
    ("workload", "samples"), ("workload", "flops_per_sample"), ("workload", "seq_len"),
    ("workload", "epochs"), ("workload", "precision"), ("workload", "hours"),
    ("checkpoint",), ("checkpoint", "sync_interval"), ("job_recovery",),
    ("job_recovery", "strategy"), ("job_recovery", "zone_cooldown"), ("service",),
    ("service", "port"), ("service", "readiness_probe"), ("service", "replicas"),
    ("service", "replica_policy"), ("service", "autoscale"), ("service", "spot"),
    ("service", "ports"), ("service", "readiness_probe", "timeout"),
    ("service", "replicas", "max"), ("service", "autoscale", "up"),
    ("service", "autoscale", "down", "below"), ("service", "replica_policy", "min_replicas"),
    ("service", "replica_policy", "target_qps_per_replica"), ("resources", "ports"),
    ("resources", "pool"), ("pool",), ("pool", "workers"), ("pool", "max_nodes"),
    ("pool", "idle_timeout"),
]  # fmt: skip

_BASE: dict[str, Any] = {
    "resources": {"accelerators": "A100:8"},
    "workload": {"model": {"params": "7B"}, "tokens": "1B"},
}

_FRAGMENTS = st.sampled_from(
    [
        "resources:", "workload:", "model:", "params: ", "accelerators: ", "any_of:",
        "ordered:", "cloud: ", "infra: ", "deadline: ", "budget: ", "envs:", "num_nodes: ",
        "A100:8", "7B", "36h", "$500", "8+", "aws/us-east-1", "x", "0", "-1", "1e999",
        "\n", "  ", "    ", "- ", "{", "}", "[", "]", ": ", ",", "&a ", "*a", "<<: ",
        "!!binary ", "!!str ", "!foo ", "'", '"', "#", "---\n", "? ", "|\n", "~", "null",
        "2024-01-01", "\t", "\x07", "\u2028",
    ]
)  # fmt: skip


def _only_spec_errors(call: Callable[[], object]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = call()
        except SpecError as error:
            message = str(error)
            assert message
            assert "pydantic" not in message
            assert "function-" not in message
            return
    if isinstance(result, tuple):
        result = result[0]
    assert isinstance(result, Task)


def _with_value(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    data: dict[str, Any] = {key: dict(item) for key, item in _BASE.items()}
    node = data
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return data


@_SETTINGS
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    _only_spec_errors(lambda: parse_task_with_warnings(text, "t.yaml"))


@_SETTINGS
@given(st.lists(_FRAGMENTS, max_size=40).map("".join))
def test_yaml_shaped_text(text: str) -> None:
    _only_spec_errors(lambda: parse_task_with_warnings(text, "t.yaml"))


@_SETTINGS
@given(yaml_like)
def test_random_structures_as_data(data: Any) -> None:
    _only_spec_errors(lambda: task_from_dict(data))


@_SETTINGS
@given(yaml_like)
def test_random_structures_as_yaml(data: Any) -> None:
    text = yaml.safe_dump(data)
    _only_spec_errors(lambda: parse_task_with_warnings(text, "t.yaml"))


@_SETTINGS
@given(st.sampled_from(_FIELD_PATHS), yaml_like)
def test_random_value_in_every_field(path: tuple[str, ...], value: Any) -> None:
    data = _with_value(path, value)
    _only_spec_errors(lambda: task_from_dict(data))
    text = yaml.safe_dump(data)
    _only_spec_errors(lambda: parse_task_with_warnings(text, "t.yaml"))


_SKY_KEYS = st.sampled_from(
    ["accelerators", "cloud", "infra", "region", "zone", "use_spot", "disk_size", "cpus",
     "memory", "image_id", "ports", "job_recovery", "any_of", "provider", "regions"]
)  # fmt: skip
_SKY_VALUES = st.one_of(
    yaml_scalars,
    st.sampled_from(["A100:8", "aws", "k8s/ctx", "*/us-east-1", "aws/r/z", "FAILOVER"]),
    st.dictionaries(st.sampled_from(["A100", "H100:8", "strategy"]), yaml_scalars, max_size=2),
    st.lists(st.sampled_from(["A100:8", "H100", "x"]), max_size=3),
)
_CANDIDATE = st.dictionaries(_SKY_KEYS, _SKY_VALUES, max_size=4)


@_SETTINGS
@given(
    st.dictionaries(_SKY_KEYS, _SKY_VALUES, max_size=5),
    st.sampled_from(["any_of", "ordered"]),
    st.lists(_CANDIDATE, max_size=4),
)
def test_skypilot_shaped_resources(
    resources: dict[str, Any], key: str, candidates: list[dict[str, Any]]
) -> None:
    with_candidates = {**resources, key: candidates}
    for res in (resources, with_candidates):
        data = {"resources": res, "run": "echo hi"}
        _only_spec_errors(lambda data=data: task_from_dict(data))  # type: ignore[misc]
