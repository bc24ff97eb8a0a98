"""Folding a node's raw telemetry samples into one time bucket (pure functions, no I/O).

Owns :func:`bucket_start` and :func:`fold`: the agents' ``Sample`` JSON (``gpus``, ``node``,
plus the optional ``train`` and ``peers`` keys, and any other figures a newer agent adds) folded
generically, field by field:

- numbers: the mean of the samples that have one (``null`` where none has);
- counters and identities (:data:`LAST_VALUE_KEYS`: ECC / XID counts, the train step, the
  checkpoint's step and time, ``cpu_count``...), strings and booleans: the last value;
- lists of strings (``throttle_reasons``): the union, in first-seen order;
- lists of objects keyed by ``index`` (GPUs) or ``node_rank`` (peers): folded per key;
- nested objects (``node``, ``train``): folded recursively (``null`` when every sample has none).

A fold is a function of the bucket's samples alone, so folding a bucket again once more of its
samples have arrived gives the same row as folding all of them at once (the store upserts it).
Moves no states.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

#: keys whose folded value is the last sample's, not the mean
LAST_VALUE_KEYS = frozenset({
    "ecc_errors_corrected", "ecc_errors_uncorrected", "xid_errors",
    "step", "checkpoint_step", "checkpoint_at", "updated_at",
    "cpu_count", "index", "node_rank", "at",
})  # fmt: skip
#: keys that identify an element of a list of objects
IDENTITY_KEYS = ("index", "node_rank")
#: the resolutions the store keeps, in seconds
RESOLUTIONS = (10, 60)


def bucket_start(at: float, resolution_s: int) -> float:
    """The start of the ``resolution_s`` bucket holding ``at`` (a multiple of it)."""
    return float(math.floor(at / resolution_s) * resolution_s)


def fold(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One bucket's samples (oldest first) folded into one record of the same shape, without
    ``at`` (the bucket's start is the row's)."""
    folded = _fold_dicts(samples)
    folded.pop("at", None)
    return folded


def _fold_dicts(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    keys: dict[str, None] = {}
    for item in items:
        keys.update(dict.fromkeys(item))
    return {key: _fold_values(key, [item.get(key) for item in items]) for key in keys}


def _fold_values(key: str, values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    if all(isinstance(v, Mapping) for v in present):
        return _fold_dicts(present)
    if all(isinstance(v, list | tuple) for v in present):
        return _fold_lists(present)
    numbers = [v for v in present if _is_number(v)]
    if key in LAST_VALUE_KEYS or len(numbers) != len(present):
        return present[-1]
    return math.fsum(numbers) / len(numbers)


def _fold_lists(lists: list[Sequence[Any]]) -> list[Any]:
    elements = [e for items in lists for e in items]
    if all(isinstance(e, str) for e in elements):
        return list(dict.fromkeys(elements))  # a union, in first-seen order
    if elements and all(isinstance(e, Mapping) for e in elements):
        return _fold_keyed(lists)
    return list(lists[-1])


def _fold_keyed(lists: Iterable[Sequence[Mapping[str, Any]]]) -> list[Any]:
    """Elements folded per identity key (per position in their list when they have none)."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for items in lists:
        for position, element in enumerate(items):
            key = next((element[k] for k in IDENTITY_KEYS if k in element), ("at", position))
            groups.setdefault(_hashable(key), []).append(element)
    folded = [_fold_dicts(group) for group in groups.values()]
    return sorted(folded, key=_order)


def _order(element: Mapping[str, Any]) -> tuple[int, float]:
    for rank, key in enumerate(IDENTITY_KEYS):
        value = element.get(key)
        if _is_number(value):
            return rank, float(value)
    return len(IDENTITY_KEYS), 0.0


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def gpu_utilisations(sample: Mapping[str, Any]) -> list[float]:
    """The GPUs' utilisation figures of one sample (those it has)."""
    found = []
    for gpu in sample.get("gpus") or ():
        value = gpu.get("utilization_pct") if isinstance(gpu, Mapping) else None
        if _is_number(value):
            found.append(float(value))
    return found


def train_step(sample: Mapping[str, Any]) -> int | None:
    """The training job's step in one sample, when it reports one."""
    train = sample.get("train")
    step = train.get("step") if isinstance(train, Mapping) else None
    return int(step) if _is_number(step) else None
