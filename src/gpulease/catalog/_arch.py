"""The host CPU architecture of an offer (the ``cpu_arch`` column): ``x86_64`` or ``arm64``.

Most images and CUDA wheels are built for x86_64; an arm64 host (AWS Graviton ``g5g``, GH200 and
GB200 Grace hosts) does not run them, so the optimizer keeps arm64 offers out unless a task asks
(``resources.cpu_arch``). Every importer fills the column through :func:`cpu_arch_of`:

1. **the source's word** where it has one (SkyPilot's ``Arch``, gpuhunt's ``cpu_arch``, AWS
   ``ProcessorInfo.SupportedArchitectures``), read by :func:`normalise`: ``x86_64``/``amd64``/
   ``x86``/``x64`` → ``x86_64``; ``arm64``/``aarch64``/``arm`` → ``arm64``;
2. **the name rule** (:func:`arch_from_name`), for rows whose source says nothing:

   - a Grace CPU (part ``GH200``, ``GB200``, ``GB300``, or that name in the instance type:
     ``p6e-gb200.36xlarge``, ``BM.GPU.GB200.4``) → arm64, on every provider;
   - AWS: a ``g`` among the attribute letters after the generation digit (``g5g``, ``c7gn``,
     ``im4gn``, ``x2gd``, ``is4gen``) or the ``a1`` family → arm64 (``g4dn``: family ``g``,
     attributes ``dn`` → x86_64);
   - Azure: a ``p`` among the lower-case feature letters after the vCPU count
     (``Standard_D4ps_v5``, ``Standard_E8pds_v5``) → arm64;
   - GCP: the Arm families ``t2a``, ``c4a``, ``n4a`` (a letter, a generation, ``a``) and ``a4x``;
   - OCI: ``*.Standard.A<n>.*`` shapes (Ampere) → arm64;
   - Alibaba: a ``y`` (Yitian) or ``r`` (Ampere) among the attribute letters (``ecs.g8y``,
     ``ecs.g6r``) → arm64;
   - anything else → x86_64.

The result is arm64 when either says arm64: a source's x86_64 does not overrule a name that shows
an Arm host, because gpuhunt writes ``x86`` for every item of a catalog that records no
architecture. A stated architecture that is neither (``ppc64le``) is kept, lower-cased, so that
a task asking x86_64 never gets it. The same rule fills the column of an offers file written
before the column existed (or a row with the cell empty).
"""

from __future__ import annotations

import functools
import re

X86_64 = "x86_64"
ARM64 = "arm64"
#: Spellings sources use, → ours.
ALIASES = {
    "x86_64": X86_64, "amd64": X86_64, "x86": X86_64, "x64": X86_64, "x86-64": X86_64,
    "arm64": ARM64, "aarch64": ARM64, "arm": ARM64, "arm64-v8a": ARM64,
}  # fmt: skip
GRACE_PARTS = ("GH200", "GB200", "GB300")
_AWS_FAMILY = re.compile(r"([a-z]+)(\d+)([a-z]*)(?:-.*)?")
_AZURE_SIZE = re.compile(r"standard_([a-z]+)(\d+)(?:-\d+)?([a-z]*)")
_GCP_ARM = re.compile(r"[a-z]\d+a")
_GCP_ARM_FAMILIES = frozenset({"a4x"})
_OCI_ARM = re.compile(r"\.standard\.a\d+(\.|$)")
_ALIBABA_FAMILY = re.compile(r"([a-z]+)(\d+)([a-z]*)")


def normalise(value: object) -> str:
    """Our name for a stated architecture: ``x86_64``, ``arm64``, another lower-case name as
    given, or "" when nothing is stated. Accepts enums (gpuhunt's ``CPUArchitecture``)."""
    value = getattr(value, "value", value)
    text = "" if value is None else str(value).strip().lower()
    return ALIASES.get(text, text)


def _aws(instance_type: str) -> bool:
    family = instance_type.split(".", 1)[0]
    match = _AWS_FAMILY.fullmatch(family)
    return family == "a1" or (match is not None and "g" in match.group(3))


def _azure(instance_type: str) -> bool:
    match = _AZURE_SIZE.match(instance_type)
    return match is not None and "p" in match.group(3)


def _gcp(instance_type: str) -> bool:
    family = instance_type.split("-", 1)[0]
    return bool(_GCP_ARM.fullmatch(family)) or family in _GCP_ARM_FAMILIES


def _oci(instance_type: str) -> bool:
    return _OCI_ARM.search(instance_type) is not None


def _alibaba(instance_type: str) -> bool:
    family = instance_type.removeprefix("ecs.").split("-", 1)[0].split(".", 1)[0]
    match = _ALIBABA_FAMILY.fullmatch(family)
    return match is not None and bool(set(match.group(3)) & {"y", "r"})


_PROVIDER_RULES = {"aws": _aws, "azure": _azure, "gcp": _gcp, "oci": _oci, "alibaba": _alibaba}


@functools.cache
def arch_from_name(provider: str, instance_type: str, part: str = "") -> str:
    """The architecture the names show (module docstring, rule 2): arm64 or x86_64."""
    name = instance_type.strip().lower()
    if part.upper().startswith(GRACE_PARTS) or any(g.lower() in name for g in GRACE_PARTS):
        return ARM64
    rule = _PROVIDER_RULES.get(provider.lower())
    return ARM64 if rule is not None and rule(name) else X86_64


def cpu_arch_of(provider: str, instance_type: str, part: str = "", stated: object = "") -> str:
    """The offer's ``cpu_arch``: arm64 when the source or the names say so, else what the source
    states, else x86_64 (module docstring)."""
    said = normalise(stated)
    if said == ARM64 or arch_from_name(provider, instance_type, part) == ARM64:
        return ARM64
    return said or X86_64
