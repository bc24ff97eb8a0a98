"""``offers.csv`` ↔ :class:`OfferTable`, with the csv module and numpy (no pandas).

The file has one header row whose names are the :data:`COLUMNS` of :class:`OfferTable` (plus any
columns we do not read, such as ``notes``). Empty numeric cells are NaN (prices, sizes) or -1
(``interruption_band``). Writes are atomic (:mod:`gpulease.atomic`).

Schema versions (:data:`OFFERS_SCHEMA`, recorded in the cache's ``meta.json``): 1 = the columns
up to ``source``; 2 adds ``cpu_arch``. A file without a :data:`DERIVED` column (a cache written
before it existed), or a row with that cell empty, still loads: the value is derived from the
row's provider, instance type and part (:func:`gpulease.catalog._arch.cpu_arch_of`). Spellings
such as ``amd64``/``aarch64`` are read as ``x86_64``/``arm64``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from gpulease.atomic import write_atomic
from gpulease.catalog._arch import cpu_arch_of
from gpulease.catalog.types import COLUMNS, OfferTable
from gpulease.errors import CatalogError

#: The version of the column set written (see the module docstring).
OFFERS_SCHEMA = 2
#: Columns a file may lack: derived from the others when missing or empty.
DERIVED = ("cpu_arch",)
#: Columns written to ``offers.csv`` after the table's own.
EXTRA_COLUMNS = ("notes",)
_FLOAT = {name for name, kind in COLUMNS.items() if kind is np.float64}
_INT = {name for name, kind in COLUMNS.items() if kind is np.int64}


def _parse_float(text: str) -> float:
    return float(text) if text else math.nan


def _parse_int(text: str) -> int:
    return int(float(text)) if text else -1


def table_from_rows(rows: Iterable[Mapping[str, object]]) -> OfferTable:
    """A table from dict rows keyed by column name (missing keys: "" / NaN / -1)."""
    rows = list(rows)
    columns: dict[str, np.ndarray] = {}
    for name, kind in COLUMNS.items():
        values = [row.get(name) for row in rows]
        if name in _FLOAT:
            columns[name] = np.array(
                [
                    math.nan if v in (None, "") else float(v)  # type: ignore[arg-type]
                    for v in values
                ],
                dtype=np.float64,
            )
        elif name in _INT:
            columns[name] = np.array(
                [
                    -1 if v in (None, "") else int(v)  # type: ignore[call-overload]
                    for v in values
                ],
                dtype=np.int64,
            )
        else:
            columns[name] = np.array(["" if v is None else str(v) for v in values], dtype=kind)
    _derive_cpu_arch(columns)
    return OfferTable.from_columns(columns)


def _derive_cpu_arch(columns: dict[str, np.ndarray]) -> None:
    """Fill ``cpu_arch`` (missing column or empty cells) and normalise its spellings; computed
    once per distinct (provider, instance type, part, stated value)."""
    n = len(columns["provider"])
    stated = columns.get("cpu_arch", np.full(n, "", dtype=np.str_)).astype(np.str_)
    if n == 0:
        columns["cpu_arch"] = stated
        return
    keys = np.char.add(np.char.add(columns["provider"].astype(np.str_), "\t"),
                       columns["instance_type"].astype(np.str_))  # fmt: skip
    keys = np.char.add(np.char.add(keys, "\t"), columns["part"].astype(np.str_))
    keys = np.char.add(np.char.add(keys, "\t"), stated)
    unique, inverse = np.unique(keys, return_inverse=True)
    found = [cpu_arch_of(*str(key).split("\t")) for key in unique]
    columns["cpu_arch"] = np.array(found, dtype=np.str_)[inverse.reshape(-1)]


def read_offers(path: Path) -> OfferTable:
    """The offers in ``path``; raises :class:`CatalogError` naming the file and line on bad data."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read the offers file {path}: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise CatalogError(f"{path}: empty offers file")
    missing = [name for name in COLUMNS if name not in header and name not in DERIVED]
    if missing:
        raise CatalogError(f"{path}: not an offers file (missing columns: {', '.join(missing)})")
    index = {name: header.index(name) for name in COLUMNS if name in header}
    rows = [row for row in reader if row]
    if any(len(row) != len(header) for row in rows):
        bad = next(n for n, row in enumerate(rows, start=2) if len(row) != len(header))
        raise CatalogError(f"{path}:{bad}: expected {len(header)} fields")
    cells = list(zip(*rows, strict=True)) if rows else [() for _ in header]
    columns: dict[str, np.ndarray] = {}
    for name, kind in COLUMNS.items():
        if name not in index:
            continue
        values = cells[index[name]]
        try:
            if name in _FLOAT:
                columns[name] = np.array([_parse_float(v) for v in values], dtype=np.float64)
            elif name in _INT:
                columns[name] = np.array([_parse_int(v) for v in values], dtype=np.int64)
            else:
                columns[name] = np.array(values, dtype=kind)
        except ValueError as exc:
            raise CatalogError(f"{path}: column {name}: {exc}") from None
    _derive_cpu_arch(columns)
    return OfferTable.from_columns(columns)


def _cell(value: object) -> str:
    if isinstance(value, float | np.floating):
        number = float(value)
        if math.isnan(number):
            return ""
        return str(int(number)) if number.is_integer() else repr(number)
    return str(value)


def offers_csv_text(table: OfferTable, notes: list[str] | None = None) -> str:
    """The CSV text of ``table`` (header + one line per offer, ``\\n`` line ends)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*COLUMNS, *EXTRA_COLUMNS])
    columns = table.column_dict()
    for i in range(len(table)):
        extra = notes[i] if notes is not None else ""
        writer.writerow([*(_cell(columns[name][i]) for name in COLUMNS), extra])
    return out.getvalue()


def write_offers(path: Path, table: OfferTable, notes: list[str] | None = None) -> None:
    """Write ``table`` to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, offers_csv_text(table, notes))
