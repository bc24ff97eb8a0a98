"""Data classes: named restrictions on where a task's data may be processed.

A :class:`DataClass` allows an offer when its provider, region, country and certifications all
pass. Built-in classes:

``phi`` / ``hipaa``
    protected health information: only providers that sign a HIPAA business associate agreement
    (offer certification ``hipaa``, taken from the providers' public compliance pages). A provider
    with no such record counts as not signing.
``eu-resident`` / ``gdpr``
    data stays in the EU/EEA: only regions located in an EU or EEA country.
``us-resident``
    data stays in the United States.

User-defined classes live in the config file::

    data_classes:
      clinical-eu:
        description: trial data, EU only, HIPAA-grade providers
        providers: [aws, gcp, azure]
        regions: ["eu-*", "europe-*"]        # fnmatch patterns
        countries: [DE, FR, NL]               # ISO 3166 alpha-2
        certifications: [hipaa]
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpulease.errors import UserInputError

#: EU member states and the other EEA countries (Iceland, Liechtenstein, Norway), ISO alpha-2.
EU_EEA_COUNTRIES = frozenset(
    {
        "AT",
        "BE",
        "BG",
        "HR",
        "CY",
        "CZ",
        "DK",
        "EE",
        "FI",
        "FR",
        "DE",
        "GR",
        "IE",
        "IT",  # EU 27
        "LV",
        "LT",
        "LU",
        "MT",
        "NL",
        "PL",
        "PT",
        "RO",
        "SK",
        "SI",
        "ES",
        "SE",
        "IS",
        "LI",
        "NO",  # the rest of the EEA
    }
)


@dataclass(frozen=True, slots=True)
class DataClass:
    """One named data class. ``None`` for a set means "no restriction on this attribute"."""

    name: str
    description: str = ""
    providers: frozenset[str] | None = None
    regions: tuple[str, ...] | None = None
    countries: frozenset[str] | None = None
    certifications: frozenset[str] = field(default_factory=frozenset)
    source: str = "built-in"


_PHI = DataClass(
    name="phi",
    description="protected health information: providers that sign a HIPAA BAA",
    certifications=frozenset({"hipaa"}),
)
_EU = DataClass(
    name="eu-resident",
    description="data stays in the EU/EEA",
    countries=EU_EEA_COUNTRIES,
)
_US = DataClass(
    name="us-resident", description="data stays in the United States", countries=frozenset({"US"})
)

BUILTIN_DATA_CLASSES: Mapping[str, DataClass] = {
    "phi": _PHI,
    "hipaa": _PHI,
    "eu-resident": _EU,
    "gdpr": _EU,
    "us-resident": _US,
}


@dataclass(slots=True)
class PolicyVerdict:
    """Which offers the task's data classes allow, and one reason line per rejected group."""

    allowed: npt.NDArray[np.bool_]
    reasons: list[tuple[str, int]]


def load_data_classes(config: Mapping[str, Any] | None = None) -> dict[str, DataClass]:
    """Built-in classes plus the config file's ``data_classes`` (which win on a name clash)."""
    classes = dict(BUILTIN_DATA_CLASSES)
    section = (config or {}).get("data_classes") or {}
    if not isinstance(section, Mapping):
        raise UserInputError("config data_classes: must be a mapping of class name to rules")
    for name, rules in section.items():
        classes[str(name)] = _parse_user_class(str(name), rules)
    return classes


_USER_KEYS = {"description", "providers", "regions", "countries", "certifications"}


def _parse_user_class(name: str, rules: object) -> DataClass:
    where = f"config data_classes.{name}"
    if not isinstance(rules, Mapping):
        raise UserInputError(f"{where}: must be a mapping of rules")
    unknown = sorted(set(map(str, rules)) - _USER_KEYS)
    if unknown:
        raise UserInputError(
            f"{where}: unknown field(s) {', '.join(unknown)}; "
            f"expected {', '.join(sorted(_USER_KEYS))}"
        )

    def strings(key: str) -> list[str] | None:
        value = rules.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserInputError(f"{where}.{key}: must be a string or a list of strings")
        return list(value)

    providers, regions = strings("providers"), strings("regions")
    countries, certs = strings("countries"), strings("certifications")
    return DataClass(
        name=name,
        description=str(rules.get("description") or ""),
        providers=frozenset(p.lower() for p in providers) if providers is not None else None,
        regions=tuple(regions) if regions is not None else None,
        countries=frozenset(c.upper() for c in countries) if countries is not None else None,
        certifications=frozenset(c.lower() for c in certs or ()),
        source="config",
    )


def resolve_data_classes(names: Sequence[str], classes: Mapping[str, DataClass]) -> list[DataClass]:
    """The classes named by a task; an unknown name is a UserInputError with a suggestion."""
    resolved = []
    for name in names:
        key = name.strip().lower()
        match = classes.get(key) or classes.get(name)
        if match is None:
            close = difflib.get_close_matches(key, list(classes), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(classes))
            raise UserInputError(f"data_policy: unknown data class {name!r}{hint}; known: {known}")
        resolved.append(match)
    return resolved


def _examples(values: Iterable[str], limit: int = 4) -> str:
    unique = sorted(set(values))
    shown = ", ".join(unique[:limit])
    return shown + (f", … (+{len(unique) - limit})" if len(unique) > limit else "")


def evaluate_data_policy(
    classes: Sequence[DataClass],
    *,
    provider: npt.NDArray[np.str_],
    region: npt.NDArray[np.str_],
    country: npt.NDArray[np.str_],
    certifications: npt.NDArray[np.str_],
    alive: npt.NDArray[np.bool_] | None = None,
) -> PolicyVerdict:
    """Apply every class in turn; each class's rejections are counted among offers still allowed
    (all offers, or those in ``alive``)."""
    allowed = np.ones(provider.shape[0], dtype=bool) if alive is None else alive.copy()
    reasons: list[tuple[str, int]] = []
    for data_class in classes:
        for reason, passing in _class_checks(data_class, provider, region, country, certifications):
            rejected = allowed & ~passing
            count = int(rejected.sum())
            if count:
                reasons.append((reason(rejected), count))
                allowed &= passing
    return PolicyVerdict(allowed, reasons)


def _class_checks(
    dc: DataClass,
    provider: npt.NDArray[np.str_],
    region: npt.NDArray[np.str_],
    country: npt.NDArray[np.str_],
    certifications: npt.NDArray[np.str_],
) -> list[tuple[Any, npt.NDArray[np.bool_]]]:
    label = f"data policy {dc.name!r}"
    checks: list[tuple[Any, npt.NDArray[np.bool_]]] = []
    if dc.providers is not None:
        ok = np.isin(provider, sorted(dc.providers))
        checks.append((lambda m: f"{label}: provider not allowed ({_examples(provider[m])})", ok))
    if dc.regions is not None:
        patterns = dc.regions
        uniq, inverse = np.unique(region, return_inverse=True)
        hits = np.array([any(fnmatch.fnmatch(str(r), p) for p in patterns) for r in uniq], bool)
        ok = hits[inverse]
        checks.append(
            (lambda m: f"{label}: region not in {', '.join(patterns)} ({_examples(region[m])})", ok)
        )
    if dc.countries is not None:
        ok = np.isin(country, sorted(dc.countries))
        where = (
            "the EU/EEA" if dc.countries == EU_EEA_COUNTRIES else ", ".join(sorted(dc.countries))
        )
        checks.append((lambda m: f"{label}: region outside {where} ({_examples(region[m])})", ok))
    for cert in sorted(dc.certifications):
        uniq, inverse = np.unique(certifications, return_inverse=True)
        hits = np.array([cert in str(c).lower().split(";") for c in uniq], dtype=bool)
        ok = hits[inverse]
        what = "no HIPAA BAA on record" if cert == "hipaa" else f"no {cert} certification on record"
        checks.append((lambda m, w=what: f"{label}: {w} for provider {_examples(provider[m])}", ok))
    return checks
