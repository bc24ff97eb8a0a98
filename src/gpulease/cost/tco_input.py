"""The inputs of ``gpulease tco`` and their parsing: flags, a tco YAML file, defaults with
sources (``data/tco_defaults.csv``). Owns no state.

Every money input is in the report's currency (``currency``, ``rate`` × USD; no live FX): the
defaults and the catalog's dollar prices are multiplied by ``rate``; a figure the user gives is
taken as it is.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpulease.errors import UserInputError

HOURS_PER_MONTH = 8760 / 12  # 730: the hours a commitment bills in a month

#: Inputs that are plain positive numbers (name → may be zero).
_NUMBERS: dict[str, bool] = {
    "months": False, "hours_per_month": False, "rate": False,
    "purchase_per_server": True, "server_watts": False, "host_watts": True, "pue": False,
    "electricity_per_kwh": True, "colocation_per_kw_month": True, "depreciation_months": False,
    "ops_fte": True, "ops_cost_per_fte_year": True, "on_demand_per_hour": False,
    "spot_per_hour": False, "committed_per_hour": False,
}  # fmt: skip
_COMPARE = frozenset({"label", "rented_on_demand", "hardware"})


@dataclass(frozen=True, slots=True)
class Default:
    """One default input with its provenance."""

    key: str
    value: float
    unit: str
    source: str
    source_date: str
    confidence: str
    notes: str


@dataclass(frozen=True, slots=True)
class Compare:
    """Figures from elsewhere (the practice's text) to set beside today's."""

    label: str = ""
    rented_on_demand: float | None = None
    hardware: float | None = None


@dataclass(frozen=True, slots=True)
class TcoInput:
    """Everything one rent-against-buy comparison needs; None = default or catalog."""

    accelerator: str
    gpus: int
    months: float
    hours_per_month: float
    gpus_per_server: int = 8
    currency: str = "USD"
    rate: float = 1.0
    providers: tuple[str, ...] = ()
    commitment: str = "1y"
    committed_off: float | None = None  # fraction off on-demand when no committed price
    purchase_per_server: float | None = None
    server_watts: float | None = None  # whole server; None: GPUs' TDP + host_watts
    host_watts: float | None = None
    pue: float | None = None
    electricity_per_kwh: float | None = None
    colocation_per_kw_month: float | None = None
    depreciation_months: float | None = None
    ops_fte: float | None = None
    ops_cost_per_fte_year: float | None = None
    on_demand_per_hour: float | None = None  # per server; None: the catalog's cheapest
    spot_per_hour: float | None = None
    committed_per_hour: float | None = None
    compare: Compare | None = None

    @property
    def servers(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_server)


FIELDS = tuple(f.name for f in fields(TcoInput))


@cache
def defaults() -> dict[str, Default]:
    """The sourced defaults (``data/tco_defaults.csv``) by key."""
    text = resources.files("gpulease.cost").joinpath("data/tco_defaults.csv").read_text("utf-8")
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {
        r["key"]: Default(
            key=r["key"],
            value=float(r["value"]),
            unit=r["unit"],
            source=r["source"],
            source_date=r["source_date"],
            confidence=r["confidence"],
            notes=r["notes"],
        )
        for r in rows
    }


def parse_gpus(value: Any, where: str = "--gpus") -> tuple[str, int]:
    """``NAME:COUNT`` (``A100-80GB:8``) → (canonical name, count ≥ 1)."""
    from gpulease.spec import canonical_accelerator_name

    text = str(value).strip() if isinstance(value, str) else ""
    name, sep, count = text.rpartition(":")
    if not sep or not name.strip() or not count.strip().isdigit() or int(count) < 1:
        raise UserInputError(f"{where}: expected NAME:COUNT such as A100-80GB:8, got {value!r}")
    try:
        canonical = canonical_accelerator_name(name.strip())
    except ValueError as exc:
        raise UserInputError(f"{where}: {exc}") from None
    return canonical, int(count)


def _number(name: str, value: Any, where: str) -> float:
    bad = isinstance(value, bool) or not isinstance(value, int | float | str)
    try:
        number = math.nan if bad else float(value)
    except ValueError:
        number = math.nan
    zero_ok = _NUMBERS[name]
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        need = "a number ≥ 0" if zero_ok else "a positive number"
        raise UserInputError(f"{where}: must be {need}, got {value!r}")
    return number


def _compare(value: Any, where: str) -> Compare:
    if not isinstance(value, Mapping) or set(map(str, value)) - _COMPARE:
        raise UserInputError(f"{where}: must be a mapping of {', '.join(sorted(_COMPARE))}")
    money = {k: _number("purchase_per_server", value[k], f"{where}.{k}")
             for k in ("rented_on_demand", "hardware") if value.get(k) is not None}  # fmt: skip
    return Compare(label=str(value.get("label", "")), **money)


def _currency(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip().isalpha() or len(value.strip()) != 3:
        raise UserInputError(f"{where}: must be a 3-letter currency code (USD, CNY)")
    return value.strip().upper()


def _gpus_per_server(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"{where}: must be a whole number ≥ 1, got {value!r}")
    return value


def _providers(value: Any, where: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(p, str) for p in items):
        raise UserInputError(f"{where}: must be a list of provider ids")
    return tuple(p.strip().lower() for p in items if p.strip())


def _commitment(value: Any, where: str) -> str:
    text = str(value).strip().lower()
    if text not in ("1y", "3y"):
        raise UserInputError(f"{where}: must be 1y or 3y, got {value!r}")
    return text


def _committed_off(value: Any, where: str) -> float:
    from gpulease.catalog.commitments import parse_off

    return parse_off(value, where)


_PARSERS: dict[str, Callable[[Any, str], Any]] = {
    "gpus_per_server": _gpus_per_server,
    "currency": _currency,
    "providers": _providers,
    "commitment": _commitment,
    "committed_off": _committed_off,
    "compare": _compare,
}


def _field(name: str, value: Any, where: str) -> Any:
    if name in _NUMBERS:
        return _number(name, value, where)
    parser = _PARSERS.get(name)
    if parser is None:
        raise UserInputError(f"{where}: unknown input {name!r}")
    return parser(value, where)


def tco_input(values: Mapping[str, Any], where: str = "tco") -> TcoInput:
    """A validated :class:`TcoInput` from named values (file keys or flags; None = unset)."""
    given = {str(k).replace("-", "_"): v for k, v in values.items() if v is not None}
    unknown = sorted(set(given) - (set(FIELDS) - {"accelerator"}) - {"gpus"})
    if unknown:
        raise UserInputError(f"{where}: unknown input(s) {', '.join(unknown)}")
    for required in ("gpus", "months", "hours_per_month"):
        if required not in given:
            flag = required.replace("_", "-")
            raise UserInputError(f"{where}: --{flag} is required (a flag or a key of the file)")
    accelerator, count = parse_gpus(given.pop("gpus"), f"{where}: --gpus")
    parsed = {k: _field(k, v, f"{where}: --{k.replace('_', '-')}") for k, v in given.items()}
    result = TcoInput(accelerator=accelerator, gpus=count, **parsed)
    if result.hours_per_month > HOURS_PER_MONTH:
        raise UserInputError(
            f"{where}: --hours-per-month {result.hours_per_month:g} is more than a month's "
            f"{HOURS_PER_MONTH:g} hours"
        )
    return result


def read_tco_file(path: Path) -> dict[str, Any]:
    """The mapping of a tco input file (YAML)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserInputError(f"--from {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise UserInputError(f"--from {path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"--from {path}: a tco file is a mapping of inputs (gpus: ...)")
    return data
