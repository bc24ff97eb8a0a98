"""The running accumulators of a bucket (``fold.Bucket``) against the fold of the raw samples
they replace: a reference copy of the former raw-sample fold (means over the samples that have
a number, the last value of counters and of mixed kinds, string unions, objects folded per
identity key) is the oracle. Samples are added in chunks, with records taken in between (the
relay's passes), and the record must equal the oracle's fold of all of them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpulease.server.telemetry.fold import IDENTITY_KEYS, LAST_VALUE_KEYS, Bucket, fold
from tests.server.test_telemetry_store import T0, sample


def _oracle(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    folded = _dicts(samples)
    folded.pop("at", None)
    return folded


def _dicts(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    keys: dict[str, None] = {}
    for item in items:
        keys.update(dict.fromkeys(item))
    return {key: _values(key, [item.get(key) for item in items]) for key in keys}


def _values(key: str, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, Mapping) for v in present):
        return _dicts(present)
    if all(isinstance(v, list) for v in present):
        return _lists(present)
    numbers = [v for v in present if isinstance(v, int | float) and not isinstance(v, bool)]
    if key in LAST_VALUE_KEYS or len(numbers) != len(present):
        return present[-1]
    return math.fsum(numbers) / len(numbers)


def _lists(present: list[Any]) -> list[Any]:
    elements = [e for items in present for e in items]
    if all(isinstance(e, str) for e in elements):
        return list(dict.fromkeys(elements))
    if elements and all(isinstance(e, Mapping) for e in elements):
        groups: dict[Any, list[Mapping[str, Any]]] = {}
        for items in present:
            for position, e in enumerate(items):
                k = next((e[i] for i in IDENTITY_KEYS if i in e), ("at", position))
                groups.setdefault(k, []).append(e)
        return sorted((_dicts(g) for g in groups.values()), key=_order)
    return list(present[-1])


def _order(element: Mapping[str, Any]) -> tuple[int, float]:
    for rank, key in enumerate(IDENTITY_KEYS):
        value = element.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return rank, float(value)
    return len(IDENTITY_KEYS), 0.0


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


KEYS = st.sampled_from(["util", "power", "step", "xid_errors", "name", "reasons", "node"])
SCALARS = (
    st.none() | st.booleans() | st.integers(-50, 50) | st.floats(-1e3, 1e3) | st.text(max_size=2)
)
VALUES = st.recursive(
    SCALARS | st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
    lambda inner: (
        st.lists(
            st.fixed_dictionaries({"index": st.integers(0, 2)}, optional={"util": inner}),
            max_size=3,
        )
        | st.dictionaries(KEYS, inner, max_size=3)
        | st.lists(inner, max_size=2)
    ),
    max_leaves=8,
)
SAMPLES = st.lists(st.dictionaries(KEYS, VALUES, max_size=4), min_size=1, max_size=8)


@given(SAMPLES, st.lists(st.integers(1, 4), max_size=8))
def test_accumulated_passes_fold_like_the_raw_samples(
    samples: list[dict[str, Any]], chunks: list[int]
) -> None:
    bucket, done = Bucket(), 0
    for size in [*chunks, len(samples)]:
        for s in samples[done : done + size]:
            bucket.add(s)
        done = min(len(samples), done + size)
        assert _close(bucket.record(), _oracle(samples[:done]))  # a pass's upsert, midway
    assert bucket.samples == len(samples)
    assert _close(fold(samples), _oracle(samples))


def test_a_gpu_sample_bucket_keeps_no_raw_sample() -> None:
    bucket = Bucket()
    first, second = sample(T0, 20, throttle=("sw_thermal",)), sample(T0 + 5, 60, ecc=4)
    bucket.add(first)
    bucket.add(second)
    first["gpus"][0]["utilization_pct"] = 999.0  # the raw samples may go: nothing refers to them
    record = bucket.record()
    assert record["gpus"][0]["utilization_pct"] == 40.0
    assert record["gpus"][0]["throttle_reasons"] == ["sw_thermal"]
    assert record["gpus"][0]["ecc_errors_corrected"] == 4
    assert record == _oracle([sample(T0, 20, throttle=("sw_thermal",)), second])
