"""SkyPilot's candidate lists, ``resources.any_of`` and ``resources.ordered``, folded into one
request by the normalization pre-pass (:mod:`gpulease.spec.normalize`).

- The entries' accelerators become a choice (``any_of``) or a preference list (``ordered``),
  every count explicit.
- Where the entries differ in place (cloud, infra, region, zone), or mix CPU and GPU entries,
  each entry is also kept as a ``resources.candidates`` item that pairs its accelerators with
  its own place, so the optimizer plans no pair the file does not list; the allow-lists then
  pool only the location fields every entry gives. Where they do not, clouds, regions and zones
  are pooled, and an entry's ``region`` joins a ``cloud`` given in ``resources``.
- ``use_spot`` that differs between entries means either pricing (``auto``); other fields must
  agree, else the first entry's value is used with a warning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpulease.spec.accelerators import Option, format_accelerators, parse_accelerators
from gpulease.spec.yaml_lines import Path, format_path

if TYPE_CHECKING:
    from gpulease.spec.normalize import Pass

__all__ = ["LOCATION_FIELDS", "RES", "merge_candidates"]

RES = ("resources",)
LOCATION_FIELDS = ("cloud", "infra", "region", "zone")

PlaceField = Callable[["Pass", dict[Any, Any], dict[Any, Any], tuple[Any, Any], Path], None]
"""Moves one resources field (key, value), written at a path, into a mapping in gpulease's names
(``normalize._resource_field``)."""


def merge_candidates(
    step: Pass, res: dict[Any, Any], key: str, bare: int | None, place: PlaceField
) -> dict[Any, Any]:
    """Fold SkyPilot's candidate list (``key``: any_of or ordered) into one request; see the
    module docstring. ``bare`` is the count of a name without one; ``place`` moves a location
    field (``cloud``, ``infra``, ``region``, ``zone``) into gpulease's names."""
    path = (*RES, key)
    entries = res.pop(key)
    if (
        not isinstance(entries, list)
        or not entries
        or not all(isinstance(e, dict) for e in entries)
    ):
        raise step.fail(path, "expected a list of resource mappings, e.g. - accelerators: A100:8")
    merged = dict(res)
    options = _pooled_accelerators(step, res, entries, path, bare)
    if options:
        merged.pop("accelerators", None)
        step.out.renames[(*RES, "accelerators")] = path
        merged["accelerators"] = format_accelerators(options, key == "ordered")
    paired = _paired(res, entries)
    if paired:
        merged["candidates"] = _candidates(step, res, entries, path, bare=bare, place=place)
        step.out.renames[(*RES, "candidates")] = path
    _pool_locations(step, merged, entries, path, place, every_entry=paired)
    _lift_common_fields(step, merged, entries, path)
    return merged


def _paired(res: dict[Any, Any], entries: list[dict[Any, Any]]) -> bool:
    """Whether the entries differ in place (or mix CPU and GPU entries): pooling them would
    allow pairs the file does not list (an A100 entry on aws and a T4 entry on gcp must not
    plan a T4 on aws; ``{region: us-east-1}`` and ``{cloud: gcp}`` are not gcp in us-east-1)."""

    def accelerators(entry: dict[Any, Any]) -> str:
        return repr(entry.get("accelerators", res.get("accelerators")))

    def place(entry: dict[Any, Any]) -> str:
        return repr([entry.get(key) for key in LOCATION_FIELDS])

    kinds = set(map(accelerators, entries))
    if "None" in kinds and len(kinds) > 1:
        return True  # an entry without accelerators is a CPU instance beside GPU ones
    return len(set(map(place, entries))) > 1


def _candidates(
    step: Pass,
    res: dict[Any, Any],
    entries: list[dict[Any, Any]],
    path: Path,
    *,
    bare: int | None,
    place: PlaceField,
) -> list[dict[Any, Any]]:
    """One candidate per entry: its accelerators (explicit counts) and its own place."""
    out = []
    for index, entry in enumerate(entries):
        candidate: dict[Any, Any] = {}
        value = entry.get("accelerators", res.get("accelerators"))
        if value is not None:
            try:
                options, ordered = parse_accelerators(value, bare=bare)
            except ValueError as exc:
                raise step.doc.error((*path, index, "accelerators"), str(exc)) from None
            candidate["accelerators"] = format_accelerators(options, ordered)
        for key in LOCATION_FIELDS:
            if key in entry:
                place(step, candidate, {}, (key, entry[key]), (*path, index, key))
        out.append(candidate)
    return out


def _pooled_accelerators(
    step: Pass, res: dict[Any, Any], entries: list[dict[Any, Any]], path: Path, bare: int | None
) -> list[Option]:
    pooled: list[Option] = []
    for index, entry in enumerate(entries):
        where = (
            (*path, index, "accelerators") if "accelerators" in entry else (*RES, "accelerators")
        )
        value = entry.get("accelerators", res.get("accelerators"))
        if value is None:
            continue
        try:
            options, _ = parse_accelerators(value, bare=bare)
        except ValueError as exc:
            raise step.doc.error(where, str(exc)) from None
        pooled.extend(option for option in options if option not in pooled)
    return pooled


def _pool_locations(
    step: Pass,
    merged: dict[Any, Any],
    entries: list[dict[Any, Any]],
    path: Path,
    place: PlaceField,
    *,
    every_entry: bool,
) -> None:
    """Pool the entries' clouds, regions and zones into the allow-lists; with candidates (which
    keep each entry's own place), only a field every entry gives. A field also set in
    ``resources`` is a conflict, a different one joins it (``cloud`` in resources, ``region``
    in each entry)."""
    located = [(index, entry) for index, entry in enumerate(entries) if _has_location(entry)]
    if not located or (every_entry and len(located) < len(entries)):
        return
    pool: dict[Any, Any] = {}
    for index, entry in located:
        found: dict[Any, Any] = {}
        for key in LOCATION_FIELDS:
            common = all(key in other for other in entries)
            if key in entry and (common or not every_entry):
                place(step, found, {}, (key, entry[key]), (*path, index, key))
        for key, value in found.items():
            pool.setdefault(key, [])
            for item in value if isinstance(value, list) else [value]:
                if item not in pool[key]:
                    pool[key].append(item)
    for key, values in pool.items():
        if key in merged:
            raise step.fail(
                (*RES, key), f"set both here and in {format_path(path)}; give it in one place"
            )
        merged[key] = values


def _has_location(resources: dict[Any, Any]) -> bool:
    return any(key in resources for key in (*LOCATION_FIELDS, "providers", "regions", "zones"))


def _lift_common_fields(
    step: Pass, merged: dict[Any, Any], entries: list[dict[Any, Any]], path: Path
) -> None:
    """Fields other than accelerators and location apply to the whole request: they must agree,
    except ``use_spot``, where entries that differ mean either pricing (``auto``)."""
    skip = {"accelerators", *LOCATION_FIELDS}
    keys = {key for entry in entries for key in entry if key not in skip}
    for key in sorted(keys, key=str):
        values = [entry.get(key, merged.get(key)) for entry in entries]
        first = next(index for index, entry in enumerate(entries) if key in entry)
        step.out.renames[(*RES, key)] = (*path, first, key)
        if key == "use_spot" and len({str(value).lower() for value in values}) > 1:
            merged[key] = "auto"
            continue
        if any(value != values[first] for value in values):
            step.warn((*path, first, key), f"differs between entries; using {values[first]!r}")
        merged[key] = values[first]
