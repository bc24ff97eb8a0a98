"""Observed matmul throughput, per offer: the summary the server writes into the gpulease home
(``<home>/bench/observed.json``) after each ``gpulease bench CLUSTER`` run, and its use by
``gpulease plan --observed`` in place of the datasheet's dense peaks.

The summary holds, per (provider, instance type) and accelerator, the median ``matmul.<dtype>``
figure (TFLOP/s per GPU, as the check measures it) of every stored run and how many runs gave
one. A plan uses an offer's observed figure for a dtype only with at least :data:`MIN_SAMPLES`
runs behind it; otherwise the datasheet, and a note says which. Pure except
:func:`write_observed` (an atomic write) and :func:`read_observed`.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpulease.atomic import write_json_atomic
from gpulease.catalog import Catalog
from gpulease.catalog.types import OfferTable

MIN_SAMPLES = 3  # runs of an offer's dtype before its observed figure replaces the datasheet
OBSERVED_FILE = Path("bench") / "observed.json"  # under the gpulease home
SCHEMA = 1
MATMUL = "matmul."


@dataclass(frozen=True, slots=True)
class BenchSample:
    """One stored node report, as the summary needs it."""

    provider: str
    instance_type: str | None
    accelerator: str | None
    report: Mapping[str, Any]  # BenchReport.to_json()


@dataclass(frozen=True, slots=True)
class ObservedOffer:
    """The observed matmul throughput of one (provider, instance type): dtype →
    (median TFLOP/s per GPU, samples)."""

    provider: str
    instance_type: str
    accelerator: str | None
    matmul: Mapping[str, tuple[float, int]]


def summarise(samples: Iterable[BenchSample], *, now: float) -> dict[str, Any]:
    """The ``observed.json`` document of ``samples`` (runs without an instance type are left
    out: nothing to plan with)."""
    figures: dict[tuple[str, str, str | None], dict[str, list[float]]] = {}
    for sample in samples:
        if not sample.instance_type:
            continue
        key = (sample.provider, sample.instance_type, sample.accelerator)
        for check in sample.report.get("checks", ()):
            name, figure = str(check.get("name", "")), check.get("figure")
            if name.startswith(MATMUL) and isinstance(figure, int | float) and figure > 0:
                figures.setdefault(key, {}).setdefault(name[len(MATMUL) :], []).append(figure)
    offers = [
        {"provider": provider, "instance_type": instance_type, "accelerator": accelerator,
         "matmul": {dtype: {"tflops": round(statistics.median(values), 3),
                            "samples": len(values)} for dtype, values in sorted(dtypes.items())}}
        for (provider, instance_type, accelerator), dtypes in sorted(
            figures.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or ""))
    ]  # fmt: skip
    return {"schema": SCHEMA, "updated_at": now, "min_samples": MIN_SAMPLES, "offers": offers}


def write_observed(home: Path, document: Mapping[str, Any]) -> Path:
    """Replace ``<home>/bench/observed.json`` atomically; its path."""
    path = home / OBSERVED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, dict(document), indent=1)
    return path


def read_observed(path: Path) -> list[ObservedOffer] | None:
    """The offers of an ``observed.json``; None when there is no file. A file that is not the
    summary (bad JSON, wrong shape) raises ValueError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not an observed summary: {exc}") from None
    try:
        return [
            ObservedOffer(str(o["provider"]), str(o["instance_type"]), o.get("accelerator"),
                          {str(d): (float(v["tflops"]), int(v["samples"]))
                           for d, v in o["matmul"].items()})
            for o in data["offers"]
        ]  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: not an observed summary: missing or bad {exc}") from None


@dataclass(frozen=True, slots=True)
class ObservedCatalog:
    """A catalog whose observed offers run on derived parts (the datasheet's spec with the
    observed dense figures); ``parts`` maps each derived part back to its datasheet part;
    ``notes`` say what was used and what was not."""

    catalog: Catalog
    parts: Mapping[str, str]
    notes: tuple[str, ...]


def observed_catalog(
    catalog: Catalog, observed: list[ObservedOffer] | None, precision: str, *, source: str
) -> ObservedCatalog:
    """``catalog`` with the observed ``precision`` figure (at least :data:`MIN_SAMPLES` runs)
    in place of the datasheet's dense peak of each observed offer; ``source`` names the file."""
    if observed is None:
        note = f"observed: no {source} yet (`gpulease bench CLUSTER` writes it): datasheet peaks"
        return ObservedCatalog(catalog, {}, (note,))
    offers = catalog.offers
    parts = offers.part.astype(object)
    specs = dict(catalog.accelerators)
    derived: dict[str, str] = {}
    notes: list[str] = []
    for entry in observed:
        rows = np.flatnonzero((offers.provider == entry.provider)
                              & (offers.instance_type == entry.instance_type))  # fmt: skip
        where = f"{entry.provider} {entry.instance_type}"
        tflops, samples = entry.matmul.get(precision, (0.0, 0))
        if rows.size == 0:
            continue
        if samples < MIN_SAMPLES:
            notes.append(f"observed: {where} has {samples} {precision} run(s), fewer than "
                         f"{MIN_SAMPLES}: datasheet peak")  # fmt: skip
            continue
        base = specs[str(offers.part[rows[0]])]
        part = f"{base.part}@{entry.provider}/{entry.instance_type}"
        specs[part] = replace(base, part=part, tflops={**base.tflops, precision: tflops},
                              source=f"observed ({samples} runs)")  # fmt: skip
        parts[rows] = part
        derived[part] = base.part
        sheet = base.peak_tflops(precision)
        notes.append(f"observed: {base.name} {precision} {tflops:,.0f} TFLOP/s over {samples} "
                     f"runs, datasheet {sheet:,.0f} ({where})")  # fmt: skip
    if not derived:
        notes.append(f"observed: no offer has {MIN_SAMPLES}+ {precision} runs in {source}: "
                     "datasheet peaks")  # fmt: skip
        return ObservedCatalog(catalog, {}, tuple(notes))
    columns = offers.column_dict()
    columns["part"] = np.array(parts.tolist(), dtype=np.str_)
    table = OfferTable.from_columns(columns, offers.extra)
    return ObservedCatalog(Catalog(table, specs, source=f"{catalog.source}+observed"),
                           derived, tuple(notes))  # fmt: skip
