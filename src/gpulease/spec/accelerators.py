"""Accelerator names and the three ways a task asks for accelerators.

This module owns:

- the canonical accelerator names (:data:`KNOWN_ACCELERATORS`, the common cloud convention:
  ``V100``, ``A100-80GB``, ``H100``, ``MI300X``, …) and their aliases (``a100_80gb``,
  ``RTXA6000``, ``H100-SXM5``), looked up case- and punctuation-insensitively by
  :func:`canonical_accelerator_name`;
- :func:`parse_accelerators`, which turns the YAML forms into ``(choices, ordered)``:

  ``"A100:8"`` / ``"A100"``         one accelerator (count None: the optimizer picks it)
  ``{A100: 8, H100: 8}``            any one of them, cheapest wins (``ordered=False``)
  ``{A100:8, H100:8}``              the same, written SkyPilot's way (keys carry the count)
  ``["H100:8", "A100-80GB:8"]``     a preference list, the first feasible wins (``ordered=True``)

- :func:`format_accelerators`, the inverse (used when a task is written back as YAML).

Every parser raises :class:`ValueError` with a message that says what was expected; the caller
adds the field and line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ACCELERATORS_JSON_SCHEMA",
    "KNOWN_ACCELERATORS",
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


def canonical_accelerator_name(name: str) -> str:
    """The canonical spelling of an accelerator name: ``a100_80gb`` → ``A100-80GB``,
    ``h100 pcie`` → ``H100-PCIe``, ``4090`` → ``RTX4090``.

    Raises :class:`ValueError` for an unknown name, with the closest known names.
    """
    exact = _exact_key(name)
    if exact in _EXACT:
        return _EXACT[exact]
    key = _key(name)
    if key in _TABLE:
        return _TABLE[key]
    close = difflib.get_close_matches(key, _TABLE, n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(_TABLE[match] for match in close))[:3]
    if suggestions:
        hint = "did you mean " + " or ".join(suggestions) + "?"
    else:
        hint = "known accelerators: " + ", ".join(KNOWN_ACCELERATORS)
    raise ValueError(f"unknown accelerator {name!r}; {hint}")


def _parse_count(count: object, text: str) -> int | None:
    """A per-node count: a positive whole number, or None when left to the optimizer."""
    if count is None:
        return None
    if isinstance(count, str):
        stripped = count.strip()
        if not (stripped.isascii() and stripped.isdigit()):
            raise ValueError(
                f"unknown accelerator count {count!r} in {text!r}; "
                "expected a positive whole number, as in A100:8"
            )
        count = int(stripped)
    if isinstance(count, float) and count.is_integer():
        count = int(count)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(
            f"accelerator count must be a positive whole number, got {count!r} in {text!r}"
        )
    return count


def _parse_one(text: str) -> tuple[str, int | None]:
    """``"A100:8"`` → ``("A100", 8)``; ``"a100"`` → ``("A100", None)``."""
    name, sep, count = text.partition(":")
    if not name.strip():
        raise ValueError(f"expected an accelerator such as A100:8, got {text!r}")
    return canonical_accelerator_name(name.strip()), _parse_count(count if sep else None, text)


def _add(choices: dict[str, int | None], name: str, count: int | None) -> None:
    if name in choices:
        raise ValueError(f"accelerator {name} is listed twice")
    choices[name] = count


def _from_mapping(value: Mapping[Any, Any]) -> dict[str, int | None]:
    choices: dict[str, int | None] = {}
    for key, count in value.items():
        if not isinstance(key, str):
            raise ValueError(f"expected an accelerator name as a key, got {key!r}")
        name, key_count = _parse_one(key)
        if key_count is not None and count is not None:
            raise ValueError(f"give the count of {name} once: {key!r} already has one")
        _add(choices, name, key_count if count is None else _parse_count(count, f"{key}: {count}"))
    return choices


def _from_list(value: list[Any]) -> dict[str, int | None]:
    choices: dict[str, int | None] = {}
    for item in value:
        if isinstance(item, str):
            _add(choices, *_parse_one(item))
        elif isinstance(item, Mapping) and len(item) == 1:
            for name, count in _from_mapping(item).items():
                _add(choices, name, count)
        else:
            raise ValueError(f"expected list items such as 'A100:8', got {item!r}")
    return choices


def parse_accelerators(value: object) -> tuple[dict[str, int | None], bool]:
    """Parse any accelerator form into ``(choices, ordered)``; see the module docstring."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped.startswith("{") and stripped.endswith("}"):  # SkyPilot's quoted set form
            items = [item for item in stripped[1:-1].split(",") if item.strip()]
            return _from_mapping(dict.fromkeys(items)), False
        name, count = _parse_one(stripped)
        return {name: count}, False
    if isinstance(value, Mapping):
        choices, ordered = _from_mapping(value), False
    elif isinstance(value, list):
        choices, ordered = _from_list(value), True
    else:
        raise ValueError(
            "expected an accelerator such as 'A100:8', a mapping {A100: 8, H100: 8} "
            f"or a list ['H100:8', 'A100:8'], got {type(value).__name__}"
        )
    if not choices:
        raise ValueError("give at least one accelerator, or leave the field out")
    return choices, ordered


def _format_one(name: str, count: int | None) -> str:
    return name if count is None else f"{name}:{count}"


def format_accelerators(choices: Mapping[str, int | None], ordered: bool) -> object:
    """The YAML form of a request: a string, a mapping or a list (the inverse of parsing)."""
    if ordered:
        return [_format_one(name, count) for name, count in choices.items()]
    if len(choices) == 1:
        [(name, count)] = choices.items()
        return _format_one(name, count)
    return dict(choices)


_ONE = {
    "type": "string",
    "pattern": r"^[^:{}\[\]]+(:\s*[0-9]+)?$",
    "examples": ["A100:8", "H100", "A100-80GB:4"],
}

ACCELERATORS_JSON_SCHEMA: dict[str, Any] = {
    "description": (
        "Accelerators per node. 'A100:8' (one type; without a count the optimizer picks it); "
        "a mapping {A100: 8, H100: 8} (any one of them, cheapest wins); a list "
        "['H100:8', 'A100-80GB:8'] (preference order, the first feasible wins). Names are "
        "case-insensitive: " + ", ".join(KNOWN_ACCELERATORS) + "."
    ),
    "anyOf": [
        _ONE,
        {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]
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
                        "additionalProperties": {"type": "integer", "minimum": 1},
                    },
                ]
            },
        },
    ],
}
