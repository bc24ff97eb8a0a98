"""Hypothesis strategies for the spec tests: valid tasks, and YAML-like junk."""

from __future__ import annotations

import os
import string
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gpulease.spec import (
    KNOWN_ACCELERATORS,
    AcceleratorRequest,
    CheckpointSpec,
    JobRecovery,
    ModelSpec,
    Resources,
    Workload,
)
from gpulease.units import Minimum


def examples(default: int) -> settings:
    """``default`` examples, or ``GPULEASE_SPEC_EXAMPLES`` of them for a deep search."""
    count = int(os.environ.get("GPULEASE_SPEC_EXAMPLES", default))
    return settings(max_examples=count, deadline=None, suppress_health_check=[HealthCheck.too_slow])


_SMALL_TEXT = st.text(max_size=12)
_NAME = st.text(alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=12)
_ENV_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)


def positive(max_value: float = 1e18) -> st.SearchStrategy[float]:
    return st.floats(min_value=1e-6, max_value=max_value, allow_nan=False, allow_infinity=False)


def whole(max_value: int = 1 << 20) -> st.SearchStrategy[int]:
    return st.integers(min_value=1, max_value=max_value)


nice_counts = st.sampled_from([7e9, 1.3e9, 26e9, 70e9, 1.28e6, 25.6e6, 12.3e9, 1e3, 1.5e12])
counts = st.one_of(nice_counts, positive())
durations = st.one_of(st.sampled_from([0.5, 1.0, 24.0, 36.0, 72.0, 720.0, 1 / 12]), positive(1e6))

json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**12), max_value=10**12),
        st.floats(allow_nan=False, allow_infinity=False),
        _SMALL_TEXT,
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(_SMALL_TEXT, children, max_size=3)
    ),
    max_leaves=8,
)

accelerator_requests = st.builds(
    AcceleratorRequest,
    options=st.lists(
        st.tuples(st.sampled_from(KNOWN_ACCELERATORS), st.one_of(st.none(), whole(64))),
        min_size=1,
        max_size=4,
        unique=True,
    ).map(tuple),
    ordered=st.booleans(),
)

minimums = st.builds(Minimum, positive(1e6), st.booleans())

resources = st.builds(
    Resources,
    accelerators=st.one_of(st.none(), accelerator_requests),
    cpus=st.one_of(st.none(), minimums),
    memory=st.one_of(st.none(), minimums),
    disk=st.one_of(st.none(), minimums),
    disk_tier=st.one_of(st.none(), st.sampled_from(["low", "medium", "high", "ultra", "best"])),
    network_tier=st.one_of(st.none(), st.sampled_from(["standard", "best"])),
    image_id=st.one_of(
        st.none(),
        st.sampled_from(
            [
                "docker:ubuntu",
                "docker:nvcr.io/nvidia/pytorch:24.01-py3",
                "docker:localhost:5000/a/b",
            ]
        ),
    ),
    cpu_arch=st.sampled_from(["x86_64", "arm64", "any"]),
    use_spot=st.sampled_from([True, False, "auto"]),
    providers=st.one_of(st.none(), st.lists(st.sampled_from(["aws", "sim", "local"]), min_size=1)),
    regions=st.one_of(st.none(), st.lists(_NAME, min_size=1, max_size=3)),
    exclude_providers=st.lists(st.sampled_from(["slurm", "kubernetes"]), max_size=2),
    exclude_regions=st.lists(st.sampled_from(["zz-1", "zz-2"]), max_size=2),
    instance_type=st.one_of(st.none(), _SMALL_TEXT),
    max_price_per_hour=st.one_of(st.none(), positive(1e4)),
    commitment=st.sampled_from(["none", "1y", "3y"]),
    provider_config=st.dictionaries(_NAME, json_values, max_size=2),
)

dense_models = st.builds(
    ModelSpec,
    params=counts,
    arch=st.just("transformer"),
    layers=st.one_of(st.none(), whole(200)),
    hidden=st.one_of(st.none(), whole(1 << 16)),
    heads=st.one_of(st.none(), st.just(64)),
    kv_heads=st.one_of(st.none(), st.sampled_from([1, 8, 64])),
)


@st.composite
def moe_models(draw: st.DrawFn) -> ModelSpec:
    """A valid mixture of experts: active ≤ params, experts_per_token ≤ experts."""
    params = draw(counts)
    active = params * draw(st.floats(min_value=1e-3, max_value=1.0))
    experts = draw(st.one_of(st.none(), whole(512)))
    per_token = draw(st.one_of(st.none(), whole(experts or 16)))
    layers = draw(st.one_of(st.none(), whole(200)))
    return ModelSpec(
        params=params,
        active_params=max(active, 1e-6),
        experts=experts,
        experts_per_token=per_token,
        layers=layers,
    )


models = st.one_of(dense_models, moe_models())

workloads = st.builds(
    Workload,
    kind=st.sampled_from(["train", "finetune", "inference"]),
    model=models,
    tokens=counts,
    samples=st.one_of(st.none(), counts),
    flops_per_sample=st.one_of(st.none(), counts),
    seq_len=st.one_of(st.none(), whole(1 << 20)),
    global_batch=st.one_of(st.none(), whole()),
    precision=st.sampled_from(["fp32", "tf32", "bf16", "fp16", "fp8"]),
    sharding=st.sampled_from([None, "ddp", "fsdp", "zero3"]),
    epochs=st.one_of(st.just(1.0), positive(1e3)),
    requests_per_second=st.one_of(st.none(), positive(1e6)),
    prompt_tokens=st.one_of(st.none(), whole()),
    output_tokens=st.one_of(st.none(), whole()),
    context_len=st.one_of(st.none(), whole()),
    hours=st.one_of(st.none(), durations),
)

task_fields = st.fixed_dictionaries(
    {},
    optional={
        "name": st.text(max_size=20),
        "resources": resources,
        "num_nodes": whole(1024),
        "workload": workloads,
        "deadline_hours": durations,
        "budget_usd": positive(1e9),
        "data_policy": st.lists(_NAME, max_size=3),
        "workdir": _SMALL_TEXT,
        "file_mounts": st.dictionaries(_SMALL_TEXT, _SMALL_TEXT, max_size=3),
        "setup": st.text(max_size=40),
        "run": st.text(max_size=40),
        "envs": st.dictionaries(_ENV_NAME, st.text(max_size=10), max_size=3),
        "checkpoint": st.builds(
            CheckpointSpec,
            dir=st.one_of(st.none(), _SMALL_TEXT),
            store=st.one_of(st.none(), _SMALL_TEXT),
            sync_interval_hours=st.one_of(st.none(), durations),
        ),
        "job_recovery": st.builds(
            JobRecovery,
            strategy=st.sampled_from(["same_region", "next_region", "on_demand_fallback"]),
            max_restarts_on_errors=st.integers(min_value=0, max_value=100),
            zone_cooldown_hours=st.one_of(st.just(0.0), durations),
        ),
    },
)

yaml_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=15),
    st.sampled_from(["7B", "A100:8", "36h", "$500", "8+", "auto", "aws/us-east-1", "-1", "0", ""]),
)

yaml_like: st.SearchStrategy[Any] = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=12), st.integers()), children, max_size=4),
    ),
    max_leaves=12,
)
