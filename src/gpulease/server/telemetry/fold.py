"""Folding a node's raw telemetry samples into one time bucket (pure, no I/O).

Owns :func:`bucket_start`, :class:`Bucket` (a bucket's running accumulators: samples are added
one at a time, oldest first, and dropped; :meth:`Bucket.record` gives the folded record at any
moment) and :func:`fold` (a list of samples folded at once: the same accumulators). The agents'
``Sample`` JSON (``gpus``, ``node``, plus the optional ``train`` and ``peers`` keys, and any
other figures a newer agent adds) is folded generically, field by field:

- numbers: the mean of the samples that have one (``null`` where none has), kept as a running
  sum and count;
- counters and identities (:data:`LAST_VALUE_KEYS`: ECC / XID counts, the train step, the
  checkpoint's step and time, ``cpu_count``...), strings and booleans: the last value;
- lists of strings (``throttle_reasons``): the union, in first-seen order;
- lists of objects keyed by ``index`` (GPUs) or ``node_rank`` (peers): folded per key;
- nested objects (``node``, ``train``): folded recursively (``null`` when every sample has none).

A fold is a function of the bucket's samples alone (in time order): adding them one pass at a
time gives the same record as folding all of them at once, so the store's upsert of a bucket
folded again is idempotent. Moves no states.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
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

# what every value of one field has been so far (a bit set)
_MAPPING, _LIST, _NUMBER = 1, 2, 4


def bucket_start(at: float, resolution_s: int) -> float:
    """The start of the ``resolution_s`` bucket holding ``at`` (a multiple of it)."""
    return float(math.floor(at / resolution_s) * resolution_s)


def fold(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One bucket's samples (oldest first) folded into one record of the same shape, without
    ``at`` (the bucket's start is the row's)."""
    bucket = Bucket()
    for sample in samples:
        bucket.add(sample)
    return bucket.record()


class Bucket:
    """One open bucket's accumulators: ``samples`` added so far, none of them kept."""

    __slots__ = ("_fields", "samples")

    def __init__(self) -> None:
        self.samples = 0
        self._fields = _Fields()

    def add(self, sample: Mapping[str, Any]) -> None:
        self.samples += 1
        self._fields.add(sample)

    def record(self) -> dict[str, Any]:
        folded = self._fields.result()
        folded.pop("at", None)
        return folded


class _Fields:
    """An object's fields, in first-seen order, one slot each (a field a sample lacks: nothing
    added). Slot ``i``: how many values it had (``counts``), which kinds all of them were
    (``kinds``), the sum of the numbers (``totals``), and ``other``: the nested fields or lists,
    or the last value when that is the answer. Flat arrays, not an object per field: a node's
    open buckets stay a few kB."""

    __slots__ = ("counts", "keys", "kinds", "other", "totals")

    def __init__(self) -> None:
        self.keys: Mapping[str, int] = _schema(())
        self.counts = array("q")
        self.totals = array("d")
        self.kinds = bytearray()
        self.other: list[Any] = []

    def add(self, item: Mapping[str, Any]) -> None:
        keys = self.keys
        for key, value in item.items():
            slot = keys.get(key)
            if slot is None:
                keys = self.keys = _schema((*keys, key))
                slot = len(self.other)
                self.counts.append(0)
                self.totals.append(0.0)
                self.kinds.append(_MAPPING | _LIST | _NUMBER)
                self.other.append(None)
            if value is not None:
                self._add(slot, key, value)

    def _add(self, slot: int, key: str, value: Any) -> None:
        self.counts[slot] += 1
        if isinstance(value, Mapping):
            kinds = self.kinds[slot] & _MAPPING
        elif isinstance(value, list | tuple):
            kinds = self.kinds[slot] & _LIST
        else:
            kinds = self.kinds[slot] & _NUMBER if _is_number(value) else 0
        self.kinds[slot] = kinds
        other = self.other[slot]
        if kinds & _MAPPING:
            fields = other if isinstance(other, _Fields) else _Fields()
            fields.add(value)
            self.other[slot] = fields
        elif kinds & _LIST:
            lists = other if isinstance(other, _Lists) else _Lists()
            lists.add(value)
            self.other[slot] = lists
        elif kinds & _NUMBER:
            self.totals[slot] += value
            self.other[slot] = value if key in LAST_VALUE_KEYS else None
        else:
            self.other[slot] = value

    def result(self) -> dict[str, Any]:
        folded: dict[str, Any] = {}
        for key, slot in self.keys.items():
            other = self.other[slot]
            if not self.counts[slot]:
                folded[key] = None
            elif isinstance(other, _Fields | _Lists):
                folded[key] = other.result()
            elif self.kinds[slot] & _NUMBER and key not in LAST_VALUE_KEYS:
                folded[key] = self.totals[slot] / self.counts[slot]
            else:
                folded[key] = other
        return folded


@lru_cache(maxsize=1024)
def _schema(keys: tuple[str, ...]) -> Mapping[str, int]:
    """The slot of each key, shared by every object of that shape (never changed)."""
    return MappingProxyType({key: slot for slot, key in enumerate(keys)})


class _Lists:
    """A field whose values are all lists: the union of their strings, their objects folded per
    identity key, or (elements of mixed kinds) the last list."""

    __slots__ = ("elements", "keyed", "last", "strings")

    def __init__(self) -> None:
        self.strings: dict[str, None] | None = _NONE_YET
        self.keyed: dict[Any, _Fields] | None = _NONE_YET
        self.last: Sequence[Any] = ()
        self.elements = False

    def add(self, items: Sequence[Any]) -> None:
        if not items:  # no element: the union and the groups stay as they are
            if self.strings is None and self.keyed is None:
                self.last = items
            return
        self.elements = True
        if self.strings is not None:
            if all(isinstance(e, str) for e in items):
                if self.strings is _NONE_YET:
                    self.strings = {}
                self.strings.update(dict.fromkeys(items))
            else:
                self.strings = None
        if self.keyed is not None:
            if all(isinstance(e, Mapping) for e in items):
                if self.keyed is _NONE_YET:
                    self.keyed = {}
                _add_keyed(self.keyed, items)
            else:
                self.keyed = None
        if self.strings is None and self.keyed is None:
            self.last = items

    def result(self) -> list[Any]:
        if self.strings is not None:
            return list(self.strings)  # a union, in first-seen order
        if self.keyed is not None and self.elements:
            return sorted((group.result() for group in self.keyed.values()), key=_order)
        return list(self.last)


#: the shared empty union and groups of a list field before any element (replaced, not filled)
_NONE_YET: dict[Any, Any] = {}


def _add_keyed(groups: dict[Any, _Fields], items: Iterable[Mapping[str, Any]]) -> None:
    """Elements folded per identity key (per position in their list when they have none)."""
    for position, element in enumerate(items):
        key = next((element[k] for k in IDENTITY_KEYS if k in element), ("at", position))
        group = groups.get(key := _hashable(key))
        if group is None:
            group = groups[key] = _Fields()
        group.add(element)


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
