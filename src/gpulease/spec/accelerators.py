"""Accelerator names and the ways a task asks for accelerators.

This module owns:

- the canonical accelerator names (:data:`KNOWN_ACCELERATORS`, the common cloud convention:
  ``V100``, ``A100-80GB``, ``H100``, ``MI300X``, …) and their aliases (``a100_80gb``,
  ``RTXA6000``, ``H100-SXM5``, SkyPilot's ``MI300``), looked up case- and
  punctuation-insensitively by :func:`canonical_accelerator_name`;
- :func:`parse_accelerators`, which turns the YAML forms into ``(options, ordered)``, where
  ``options`` is a list of ``(name, count)`` pairs (count None: the optimizer sizes it):

  ``"A100:8"``                      one accelerator at one count
  ``"A100"``                        one accelerator; its count is ``bare`` (1 in SkyPilot's
                                    meaning; None, sized, where the task has a workload)
  ``"A100:auto"``                   one accelerator, the count left to the optimizer
  ``{A100: 8, H100: 8}``            any one of them, cheapest wins (``ordered=False``)
  ``{A100:4, A100:8, A100-80GB:2}`` the same, written SkyPilot's way (keys carry the count; one
                                    name may come at several counts)
  ``["H100:8", "A100-80GB:8"]``     a preference list, the first feasible wins (``ordered=True``)

- :func:`format_accelerators`, the inverse (used when a task is written back as YAML; a sized
  count is written ``NAME:auto`` so that it reads back the same whatever the task).

Every parser raises :class:`ValueError` with a message that says what was expected; the caller
adds the field and line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ACCELERATORS_JSON_SCHEMA",
    "AUTO",
    "KNOWN_ACCELERATORS",
    "Option",
    "canonical_accelerator_name",
    "format_accelerators",
    "parse_accelerators",
]

KNOWN_ACCELERATORS: tuple[str, ...] = (
    # NVIDIA data-centre parts
    "K80", "P4", "P100", "V100", "V100-32GB", "T4", "A10", "A10G", "A30", "A40",
    "A100", "A100-80GB", "H100", "H100-PCIe", "H100-NVL", "H100-MEGA", "H200", "H200-NVL",
    "GH200", "B100", "B200", "GB200", "L4", "L40", "L40S",
    # NVIDIA parts made for the Chinese market (export variants)
    "H800", "H800-PCIe", "H20", "A800", "A800-PCIe", "L20",
    # NVIDIA workstation and consumer parts
    "A4000", "A5000", "A6000", "RTX4000-Ada", "RTX6000-Ada", "RTXPRO6000",
    "RTX3090", "RTX4090", "RTX5090",
    # AMD
    "MI100", "MI210", "MI250", "MI250X", "MI300X", "MI325X", "MI355X",
    # Intel Gaudi, AWS Trainium / Inferentia
    "Gaudi", "Gaudi2", "Gaudi3", "Trainium", "Trainium2", "Inferentia", "Inferentia2",
)  # fmt: skip

_ALIASES: dict[str, tuple[str, ...]] = {
    "V100": ("V100-16GB",),
    "A100": ("A100-40GB",),
    "A100-80GB": ("A100-80G",),
    "H100": ("H100-80GB", "H100-HBM3", "H100-SXM5-80GB"),
    "H100-PCIe": ("H100-PCIe-80GB",),
    "H100-NVL": ("H100-NVL-94GB", "H100-NVL-96GB"),
    "H100-MEGA": ("H100-MEGA-80GB",),
    "H200": ("H200-141GB",),
    "H200-NVL": ("H200-NVL-141GB",),
    "H800": ("H800-80GB",),
    "H800-PCIe": ("H800-PCIe-80GB",),
    "H20": ("H20-96GB",),
    "A800": ("A800-80GB",),
    "A800-PCIe": ("A800-PCIe-80GB",),
    "L20": ("L20-48GB",),
    "RTX3090": ("3090",),
    "RTX4090": ("4090", "RTX-4090-24GB"),
    "RTX5090": ("5090", "RTX-5090-32GB"),
    "A10G": ("A10G-24GB",),
    "A6000": ("RTXA6000", "RTX-A6000"),
    "A5000": ("RTXA5000",),
    "A4000": ("RTXA4000",),
    "RTX6000-Ada": ("RTX6000ADA", "RTX-6000-Ada"),
    "RTX4000-Ada": ("RTX4000ADA",),
    "RTXPRO6000": ("RTX-PRO-6000", "RTXPRO6000-Blackwell"),
    "T4": ("T4G",),
    "MI300X": ("MI300",),
    "MI325X": ("MI325",),
    "MI355X": ("MI355",),
    "Gaudi": ("HL-205",),
    "Gaudi2": ("HL-225",),
    "Trainium": ("TRN1",),
    "Trainium2": ("TRN2",),
    "Inferentia": ("INF1",),
    "Inferentia2": ("INF2",),
}

_VENDOR_WORDS = re.compile(r"^(nvidia|tesla|geforce|amd|instinct|intel|habana|aws)+")
_FORM_FACTOR = re.compile(r"sxm[0-9]?|pcie")


def _exact_key(name: str) -> str:
    """A name in lower case, vendor words and punctuation dropped: ``H100 PCIe`` → ``h100pcie``."""
    return _VENDOR_WORDS.sub("", re.sub(r"[^a-z0-9]", "", name.lower()))


def _key(name: str) -> str:
    """The loose lookup key of a name: the exact key with the form factor dropped too."""
    return _FORM_FACTOR.sub("", _exact_key(name))


def _build_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(exact key → name, loose key → name). A form factor that is part of a name
    (``H100-PCIe``) is matched exactly; elsewhere it is noise (``A100-SXM4`` is ``A100``)."""
    exact = {_exact_key(name): name for name in KNOWN_ACCELERATORS}
    for canonical, aliases in _ALIASES.items():
        exact.update({_exact_key(alias): canonical for alias in aliases})
    loose = {key: name for key, name in exact.items() if _key(key) == key}
    for key, name in exact.items():
        loose.setdefault(_key(key), name)
    return exact, loose


_EXACT, _TABLE = _build_tables()


_TPU = re.compile(r"^tpu[-_ ]?v?[0-9]", re.IGNORECASE)


def canonical_accelerator_name(name: str) -> str:
    """The canonical spelling of an accelerator name: ``a100_80gb`` → ``A100-80GB``,
    ``h100 pcie`` → ``H100-PCIe``, ``4090`` → ``RTX4090``, ``MI300`` → ``MI300X``.

    Raises :class:`ValueError` for an unknown name, with the closest known names (and, for a
    TPU, that gpulease plans GPUs only).
    """
    exact = _exact_key(name)
    if exact in _EXACT:
        return _EXACT[exact]
    key = _key(name)
    if key in _TABLE:
        return _TABLE[key]
    if _TPU.match(name.strip()):
        raise ValueError(
            f"TPUs are not supported: {name!r} is a Google TPU, and gpulease plans GPU and CPU "
            "offers only; ask for GPUs instead, e.g. accelerators: L4:1"
        )
    close = difflib.get_close_matches(key, _TABLE, n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(_TABLE[match] for match in close))[:3]
    if suggestions:
        hint = "did you mean " + " or ".join(suggestions) + "?"
    else:
        hint = "known accelerators: " + ", ".join(KNOWN_ACCELERATORS)
    raise ValueError(f"unknown accelerator {name!r}; {hint}")


Option = tuple[str, int | None]
"""One acceptable accelerator: its canonical name and GPUs per node (None: sized)."""

AUTO = "auto"
_BARE = object()  # a name written without a count
_Raw = tuple[str, object]  # a name and its count as written: an int, None (auto) or _BARE


def _parse_count(count: object, text: str) -> object:
    """A per-node count: a positive whole number, None for ``auto``, ``_BARE`` when absent."""
    if count is None:
        return _BARE
    if isinstance(count, str):
        stripped = count.strip()
        if stripped.lower() == AUTO:
            return None
        if not (stripped.isascii() and stripped.isdigit()):
            raise ValueError(
                f"unknown accelerator count {count!r} in {text!r}; "
                "expected a positive whole number (A100:8) or auto (A100:auto)"
            )
        count = int(stripped)
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"accelerator count must be a positive whole number, got {count!r} in {text!r}"
        )
    return count


def _parse_one(text: str) -> _Raw:
    """``"A100:8"`` → ``("A100", 8)``; ``"a100:auto"`` → ``("A100", None)``; ``"A100"`` →
    ``("A100", _BARE)``."""
    name, sep, count = text.partition(":")
    if not name.strip():
        raise ValueError(f"expected an accelerator such as A100:8, got {text!r}")
    return canonical_accelerator_name(name.strip()), _parse_count(count if sep else None, text)


def _from_mapping(value: Mapping[Any, Any]) -> list[_Raw]:
    options = []
    for key, count in value.items():
        if not isinstance(key, str):
            raise ValueError(f"expected an accelerator name as a key, got {key!r}")
        name, key_count = _parse_one(key)
        if key_count is not _BARE and count is not None:
            raise ValueError(f"give the count of {name} once: {key!r} already has one")
        given = key_count if count is None else _parse_count(count, f"{key}: {count}")
        options.append((name, given))
    return options


def _from_list(value: list[Any]) -> list[_Raw]:
    options: list[_Raw] = []
    for item in value:
        if isinstance(item, str):
            options.append(_parse_one(item))
        elif isinstance(item, Mapping) and len(item) == 1:
            options.extend(_from_mapping(item))
        else:
            raise ValueError(f"expected list items such as 'A100:8', got {item!r}")
    return options


def _raw_options(value: object) -> tuple[list[_Raw], bool]:
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{") and stripped.endswith("}"):  # SkyPilot's quoted set form
            items = [item for item in stripped[1:-1].split(",") if item.strip()]
            return _from_mapping(dict.fromkeys(item.strip() for item in items)), False
        return [_parse_one(stripped)], False
    if isinstance(value, Mapping):
        return _from_mapping(value), False
    if isinstance(value, list):
        return _from_list(value), True
    raise ValueError(
        "expected an accelerator such as 'A100:8', a mapping {A100: 8, H100: 8} "
        f"or a list ['H100:8', 'A100:8'], got {type(value).__name__}"
    )


def parse_accelerators(value: object, *, bare: int | None = None) -> tuple[list[Option], bool]:
    """Parse any accelerator form into ``(options, ordered)``; see the module docstring. A name
    without a count gets ``bare``; repeated options are kept once, in their first place."""
    raw, ordered = _raw_options(value)
    if not raw:
        raise ValueError("give at least one accelerator, or leave the field out")
    options: list[Option] = []
    for name, count in raw:
        option = (name, bare if count is _BARE else count)
        if option not in options:
            options.append(option)  # type: ignore[arg-type]
    return options, ordered


def _format_one(name: str, count: int | None) -> str:
    return f"{name}:{AUTO}" if count is None else f"{name}:{count}"


def format_accelerators(options: Sequence[Option], ordered: bool) -> object:
    """The YAML form of a request: a string, a mapping or a list (the inverse of parsing)."""
    if ordered:
        return [_format_one(name, count) for name, count in options]
    if len(options) == 1:
        return _format_one(*options[0])
    names = [name for name, _ in options]
    if len(set(names)) == len(names):
        return {name: AUTO if count is None else count for name, count in options}
    return {_format_one(name, count): None for name, count in options}


_ONE = {
    "type": "string",
    "pattern": r"^[^:{}\[\]]+(:\s*([0-9]+|[Aa][Uu][Tt][Oo]))?$",
    "examples": ["A100:8", "H100", "A100-80GB:4", "H100:auto"],
}

_AUTO = {"type": "string", "pattern": "^[Aa][Uu][Tt][Oo]$"}

ACCELERATORS_JSON_SCHEMA: dict[str, Any] = {
    "description": (
        "Accelerators per node. 'A100:8' (one type at one count); 'A100' (one GPU, as in "
        "SkyPilot, unless the task has a workload for the optimizer to size); 'A100:auto' (the "
        "optimizer sizes the count); a mapping {A100: 8, H100: 8} or SkyPilot's set "
        "{A100:4, A100:8, A100-80GB:2} (any one of them, cheapest wins); a list "
        "['H100:8', 'A100-80GB:8'] (preference order, the first feasible wins). Names are "
        "case-insensitive: " + ", ".join(KNOWN_ACCELERATORS) + "."
    ),
    "anyOf": [
        _ONE,
        {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}, _AUTO]
            },
        },
        {
            "type": "array",
            "minItems": 1,
            "items": {
                "anyOf": [
                    _ONE,
                    {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 1,
                        "additionalProperties": {
                            "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}, _AUTO]
                        },
                    },
                ]
            },
        },
    ],
}
